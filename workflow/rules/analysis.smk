# Analysis stage (no GPU): the worklog notebook turns a study's tables into figures and one
# page; publish copies them into worklogs/<gpu>/<study>/ (committed).
#
# Where the tables come from is decided per (gpu, study) by measured_here (analysis_inputs.smk):
#   measured here (this run has that GPU, and the study is configured):
#       results/<gpu>/<study>/*.parquet, results/<gpu>/device.parquet,
#       results/build/<study>/{build,sass}.parquet and study.json (rule study_meta)
#   otherwise, rendered from published data, not re-measured:
#       worklogs/<gpu>/<study>/data/*.parquet and data/study.json
# Either way one rule writes results/<gpu>/<study>/worklog.{md,html} and figures/, so no
# output pattern is shared with the measuring rules and nothing is copied back and forth.
# Rule all asks for worklog_targets(TARGET_GPU); the input functions are in
# analysis_inputs.smk. Every path is kernelbook.layout's.


include: "analysis_inputs.smk"


report: "../report/workflow.rst"


rule study_meta:
    input:
        study_sources,
    output:
        kb_layout.build_file("{study}", "study.json", R),
    log:
        kb_layout.log("{study}", "study_meta.log", results=R),
    benchmark:
        kb_layout.benchmark("study_meta", "build", "{study}", "all", R)
    conda:
        "../envs/kernelbook.yaml"
    params:
        spec=study_spec,
        settings=settings_arg,
        py=PY,
    shell:
        "{params.py} -m kernelbook --settings {params.settings} meta {wildcards.study} "
        "--out {output} > {log} 2>&1"


rule study_figures:
    input:
        unpack(study_tables),
    output:
        report(
            directory(kb_layout.study_file("{gpu}", "{study}", "study_figures", R)),
            patterns=["{name}.png"],
            caption="../report/study_figures.rst",
            category="Figures",
            subcategory="{study} on {gpu}",
            labels={"study": "{study}", "GPU": "{gpu}", "figure": "{name}"},
        ),
    log:
        notebook=kb_layout.log("{study}", "study_figures", "{gpu}.ipynb", results=R),
    benchmark:
        kb_layout.benchmark("study_figures", "{gpu}", "{study}", "all", R)
    conda:
        "../envs/kernelbook.yaml"
    params:
        mode=page_mode,
        notebook=f"{ANALYSIS}/{{study}}.ipynb",
    script:
        "../scripts/notebook.py"


rule worklog:
    input:
        unpack(worklog_inputs),
    output:
        md=kb_layout.study_file("{gpu}", "{study}", "worklog.md", R),
        html=report(
            kb_layout.study_file("{gpu}", "{study}", "worklog.html", R),
            caption="../report/worklog.rst",
            category="Worklogs",
            labels={"study": "{study}", "GPU": "{gpu}", "page": "worklog"},
        ),
        figures=report(
            directory(kb_layout.study_file("{gpu}", "{study}", "figures", R)),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
            subcategory="{study} on {gpu}",
            labels={"study": "{study}", "GPU": "{gpu}", "figure": "{name}"},
        ),
    log:
        notebook=kb_layout.log("{study}", "worklog", "{gpu}.ipynb", results=R),
    benchmark:
        kb_layout.benchmark("worklog", "{gpu}", "{study}", "all", R)
    conda:
        "../envs/kernelbook.yaml"
    params:
        mode=page_mode,
        stale=page_stale,
        notebook=f"{ANALYSIS}/worklog.ipynb",
    script:
        "../scripts/notebook.py"


rule publish:
    input:
        publish_inputs,
    log:
        kb_layout.run_log("publish.log", R),
    conda:
        "../envs/kernelbook.yaml"
    params:
        what=publish_args,
        results=R,
        worklogs=WORKLOGS,
        py=PY,
    shell:
        "{params.py} -m kernelbook publish --results {params.results} {params.what} "
        "--worklogs {params.worklogs} 2>&1 | tee {log}"

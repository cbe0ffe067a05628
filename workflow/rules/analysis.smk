# Analysis stage (no GPU): the worklog notebook turns a study's tables into figures and one
# page; publish copies them into worklogs/<gpu>/<study>/ (committed).
#
# Where the tables come from is decided per (gpu, study) by kernelbook.report.publish.Worklogs:
#   measured here (this machine has that GPU, and the study is configured):
#       results/<gpu>/<study>/*.parquet, results/<gpu>/device.parquet,
#       results/build/<study>/{build,sass}.parquet and study.json (rule study_meta)
#   otherwise, rendered from published data, not re-measured:
#       worklogs/<gpu>/<study>/data/*.parquet and data/study.json
# Either way one rule writes results/<gpu>/<study>/worklog.{md,html} and figures/, so no
# output pattern is shared with the measuring rules and nothing is copied back and forth.
# Rule all asks for worklog_targets(TARGET_GPU).

from kernelbook.report import publish as kb_publish  # noqa: E402

# The notebooks run through kernelbook.report.notebook (workflow/scripts/notebook.py) rather than
# the notebook: directive, which prints a papermill probe and a kernel warning on every job.
ANALYSIS = str(Path(workflow.basedir) / "analysis")
WORKLOGS = kb_publish.Worklogs(
    R,
    TARGET_GPU,
    PROJECT,
    workflow,
    analysis=ANALYSIS,
    no_gpu_why=NO_GPU_WHY,
)
worklog_targets = WORKLOGS.targets
WORKLOGS.announce()


report: "../report/workflow.rst"


rule study_meta:
    input:
        WORKLOGS.study_sources,
    output:
        f"{R}/build/{{study}}/study.json",
    log:
        f"{R}/logs/{{study}}/study_meta.log",
    benchmark:
        f"{R}/benchmarks/study_meta/build/{{study}}/all.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        spec=WORKLOGS.study_spec,
        settings=settings_arg,
        py=PY,
    shell:
        "{params.py} -m kernelbook.report.worklog --settings {params.settings} meta {wildcards.study} "
        "--out {output} > {log} 2>&1"


rule study_figures:
    input:
        unpack(WORKLOGS.study_tables),
    output:
        report(
            directory(f"{R}/{{gpu}}/{{study}}/study_figures"),
            patterns=["{name}.png"],
            caption="../report/study_figures.rst",
            category="Figures",
            subcategory="{study} on {gpu}",
            labels={"study": "{study}", "GPU": "{gpu}", "figure": "{name}"},
        ),
    log:
        notebook=f"{R}/logs/{{study}}/study_figures/{{gpu}}.ipynb",
    benchmark:
        f"{R}/benchmarks/study_figures/{{gpu}}/{{study}}/all.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        mode=WORKLOGS.mode,
        notebook=f"{ANALYSIS}/{{study}}.ipynb",
    script:
        "../scripts/notebook.py"


rule worklog:
    input:
        unpack(WORKLOGS.worklog_inputs),
    output:
        md=f"{R}/{{gpu}}/{{study}}/worklog.md",
        html=report(
            f"{R}/{{gpu}}/{{study}}/worklog.html",
            caption="../report/worklog.rst",
            category="Worklogs",
            labels={"study": "{study}", "GPU": "{gpu}", "page": "worklog"},
        ),
        figures=report(
            directory(f"{R}/{{gpu}}/{{study}}/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
            subcategory="{study} on {gpu}",
            labels={"study": "{study}", "GPU": "{gpu}", "figure": "{name}"},
        ),
    log:
        notebook=f"{R}/logs/{{study}}/worklog/{{gpu}}.ipynb",
    benchmark:
        f"{R}/benchmarks/worklog/{{gpu}}/{{study}}/all.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        mode=WORKLOGS.mode,
        stale=WORKLOGS.stale,
        notebook=f"{ANALYSIS}/worklog.ipynb",
    script:
        "../scripts/notebook.py"


rule publish:
    input:
        WORKLOGS.publish_inputs,
    log:
        f"{R}/logs/publish.log",
    conda:
        "../envs/kernelbook.yaml"
    params:
        what=WORKLOGS.publish_args,
        results=R,
        worklogs=WORKLOGS.worklogs,
        py=PY,
    shell:
        "{params.py} -m kernelbook.report.publish --worklogs {params.worklogs} publish "
        "--results {params.results} {params.what} 2>&1 | tee {log}"

# Profile and sanitize stages (GPU): Nsight Compute metrics and the roofline per study (one
# ncu run for every variant of a study, each variant on its own where that run fails);
# compute-sanitizer per study (each tool one process for the study's variants where it
# finds nothing, each variant on its own otherwise), and a gate that fails on unexplained
# findings. Both run in their own processes, apart from the timing, each within its time
# limit (timeouts.ncu_s, timeouts.sanitizer_s). An autotuned variant is profiled and sanitized through the
# candidate that won at the size in question; a plain one after its bench, which says the
# sizes it failed at: those are not profiled, and a hanging kernel is not sanitized.


rule profile:
    input:
        unpack(study_checked_inputs),
    output:
        table=RL.study_file("{gpu}", "{study}", "profile.parquet"),
        reports=directory(RL.job_file("{gpu}", "{study}", "profile", "reports")),
    log:
        RL.log("{study}", "profile", "{gpu}", "all.log"),
    benchmark:
        RL.benchmark("profile", "{gpu}", "{study}", "all")
    priority: 5
    conda:
        "../envs/kernelbook.yaml"
    resources:
        gpu=1,
        gpu_model=GPU_MODEL,
    params:
        settings=settings_arg,
        build_dir=lambda w: RL.build_dir(w.study),
        bench_dir=lambda w: RL.job_dir(w.gpu, w.study, "bench"),
        tuned_dir=lambda w: RL.job_dir(w.gpu, w.study, "tuned"),
        py=PY,
    shell:
        "KERNELBOOK_GPU_MODEL={wildcards.gpu} {params.py} -m kernelbook "
        "--settings {params.settings} profile {wildcards.study} --all "
        "--build-dir {params.build_dir} --bench-dir {params.bench_dir} "
        "--tuned-dir {params.tuned_dir} --reports {output.reports} --out {output.table} "
        "> {log} 2>&1"


rule roofline:
    input:
        profile=RL.study_file("{gpu}", "{study}", "profile.parquet"),
        measurements=RL.study_file("{gpu}", "{study}", "measurements.parquet"),
        device=RL.device_table("{gpu}"),
    output:
        RL.study_file("{gpu}", "{study}", "roofline.parquet"),
    log:
        RL.log("{study}", "roofline", "{gpu}.log"),
    benchmark:
        RL.benchmark("roofline", "{gpu}", "{study}", "all")
    conda:
        "../envs/kernelbook.yaml"
    params:
        settings=settings_arg,
        py=PY,
    shell:
        "{params.py} -m kernelbook --settings {params.settings} roofline {wildcards.study} "
        "--profile {input.profile} --measurements {input.measurements} --device {input.device} "
        "--out {output} > {log} 2>&1"


rule sanitize:
    input:
        unpack(study_checked_inputs),
    output:
        RL.study_file("{gpu}", "{study}", "sanitizer.parquet"),
    log:
        RL.log("{study}", "sanitize", "{gpu}", "all.log"),
    benchmark:
        RL.benchmark("sanitize", "{gpu}", "{study}", "all")
    priority: 1
    conda:
        "../envs/kernelbook.yaml"
    resources:
        gpu=1,
        gpu_model=GPU_MODEL,
    params:
        settings=settings_arg,
        build_dir=lambda w: RL.build_dir(w.study),
        bench_dir=lambda w: RL.job_dir(w.gpu, w.study, "bench"),
        tuned_dir=lambda w: RL.job_dir(w.gpu, w.study, "tuned"),
        py=PY,
    shell:
        "KERNELBOOK_GPU_MODEL={wildcards.gpu} {params.py} -m kernelbook "
        "--settings {params.settings} sanitize {wildcards.study} --all "
        "--build-dir {params.build_dir} --bench-dir {params.bench_dir} "
        "--tuned-dir {params.tuned_dir} --out {output} > {log} 2>&1"


rule sanitize_gate:
    input:
        RL.study_file("{gpu}", "{study}", "sanitizer.parquet"),
    output:
        RL.study_file("{gpu}", "{study}", "sanitize.ok"),
    log:
        RL.log("{study}", "sanitize_gate", "{gpu}.log"),
    benchmark:
        RL.benchmark("sanitize_gate", "{gpu}", "{study}", "all")
    conda:
        "../envs/kernelbook.yaml"
    params:
        settings=settings_arg,
        py=PY,
    shell:
        "{params.py} -m kernelbook --settings {params.settings} sanitize-gate {wildcards.study} "
        "{input} --out {output} > {log} 2>&1"

# Bench stage (GPU): check every size against the reference, then time it beside the
# baseline; a tuned variant's candidates are benched in one job (candidates/: one start-up
# and one GPU lock for the tune space) and reduce to the tuned variant, whose winner at the
# headline then runs at the sizes it was not tuned at (sweep/); one table per study.
# A variant that fails (compile, launch, wrong, crash, hang) is recorded as failed rows and
# its job succeeds, so the study's tables and page are made; the gate of each study then
# fails the run at its end with one line per failure (negative controls that fail as their
# `expect` says pass it).


rule bench:
    input:
        cubin=RL.job_build_file("{study}", "{variant}", "kernel.cubin"),
        build=RL.job_build_file("{study}", "{variant}", "build.parquet"),
    output:
        table=RL.job_table("{gpu}", "{study}", "bench", "{variant}"),
        samples=RL.samples_table("{gpu}", "{study}", "bench", "{variant}"),
    log:
        RL.log("{study}", "bench", "{gpu}", "{variant}.log"),
    benchmark:
        RL.benchmark("bench", "{gpu}", "{study}", "{variant}")
    priority: host_timed_priority
    conda:
        "../envs/kernelbook.yaml"
    threads: host_timed_threads
    resources:
        gpu=1,
        gpu_model=GPU_MODEL,
    params:
        spec=variant_spec,
        settings=settings_arg,
        py=PY,
    shell:
        "KERNELBOOK_GPU_MODEL={wildcards.gpu} {params.py} -m kernelbook "
        "--settings {params.settings} bench {wildcards.study} "
        "{wildcards.variant} --cubin {input.cubin} --build-table {input.build} "
        "--out {output.table} --samples-out {output.samples} --record-failure > {log} 2>&1"


rule bench_candidates:
    input:
        unpack(candidate_builds),
    output:
        table=RL.job_table("{gpu}", "{study}", "candidates", "{variant}"),
        samples=RL.samples_table("{gpu}", "{study}", "candidates", "{variant}"),
    log:
        RL.log("{study}", "candidates", "{gpu}", "{variant}.log"),
    benchmark:
        RL.benchmark("bench_candidates", "{gpu}", "{study}", "{variant}")
    priority: host_timed_priority
    conda:
        "../envs/kernelbook.yaml"
    threads: host_timed_threads
    resources:
        gpu=1,
        gpu_model=GPU_MODEL,
    params:
        settings=settings_arg,
        build_dir=lambda w: RL.build_dir(w.study),
        py=PY,
    shell:
        "KERNELBOOK_GPU_MODEL={wildcards.gpu} {params.py} -m kernelbook "
        "--settings {params.settings} bench {wildcards.study} {wildcards.variant} "
        "--candidates --build-dir {params.build_dir} --out {output.table} "
        "--samples-out {output.samples} --record-failure > {log} 2>&1"


rule select_tuned:
    input:
        RL.job_table("{gpu}", "{study}", "candidates", "{variant}"),
    output:
        RL.job_table("{gpu}", "{study}", "tuned", "{variant}"),
    log:
        RL.log("{study}", "select", "{gpu}", "{variant}.log"),
    benchmark:
        RL.benchmark("select_tuned", "{gpu}", "{study}", "{variant}")
    priority: 10
    conda:
        "../envs/kernelbook.yaml"
    params:
        settings=settings_arg,
        py=PY,
    shell:
        "{params.py} -m kernelbook --settings {params.settings} select {wildcards.study} "
        "{wildcards.variant} --out {output} {input} > {log} 2>&1"


rule bench_tuned_sweep:
    input:
        unpack(tuned_inputs),
    output:
        table=RL.job_table("{gpu}", "{study}", "sweep", "{variant}"),
        samples=RL.samples_table("{gpu}", "{study}", "sweep", "{variant}"),
    log:
        RL.log("{study}", "sweep", "{gpu}", "{variant}.log"),
    benchmark:
        RL.benchmark("bench_tuned_sweep", "{gpu}", "{study}", "{variant}")
    priority: host_timed_priority
    conda:
        "../envs/kernelbook.yaml"
    threads: host_timed_threads
    resources:
        gpu=1,
        gpu_model=GPU_MODEL,
    params:
        spec=variant_spec,
        settings=settings_arg,
        tuned=tuned_arg,
        build_dir=lambda w: RL.build_dir(w.study),
        py=PY,
    shell:
        "KERNELBOOK_GPU_MODEL={wildcards.gpu} {params.py} -m kernelbook "
        "--settings {params.settings} bench {wildcards.study} "
        "{wildcards.variant} {params.tuned} --build-dir {params.build_dir} "
        "--out {output.table} --samples-out {output.samples} --record-failure > {log} 2>&1"


rule measurements:
    input:
        unpack(measurement_inputs),
    output:
        RL.study_file("{gpu}", "{study}", "measurements.parquet"),
    log:
        RL.log("{study}", "measurements", "{gpu}.log"),
    benchmark:
        RL.benchmark("measurements", "{gpu}", "{study}", "all")
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
        predict=predict_arg,
    shell:
        "{params.py} -m kernelbook gather measurements {output} {input.bench} {params.predict} "
        "> {log} 2>&1"


rule device:
    output:
        RL.device_table("{gpu}"),
    log:
        RL.run_log("device", "{gpu}.log"),
    benchmark:
        RL.device_benchmark("{gpu}")
    priority: 20
    conda:
        "../envs/kernelbook.yaml"
    # every core: its launch overheads are host time (nothing else may compete for the CPU)
    threads: ALL_CORES
    resources:
        gpu=1,
        gpu_model=GPU_MODEL,
    params:
        settings=lambda w: shlex.quote(json.dumps({**SETTINGS, "studies": []})),
        py=PY,
    shell:
        "KERNELBOOK_GPU_MODEL={wildcards.gpu} {params.py} -m kernelbook "
        "--settings {params.settings} device --out {output} > {log} 2>&1"


rule samples_table:
    input:
        samples_files,
    output:
        RL.study_file("{gpu}", "{study}", "samples.parquet"),
    log:
        RL.log("{study}", "samples", "{gpu}.log"),
    benchmark:
        RL.benchmark("samples_table", "{gpu}", "{study}", "all")
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
    shell:
        "{params.py} -m kernelbook gather samples {output} {input} > {log} 2>&1"


rule stages:
    input:
        stage_benchmarks,
    output:
        RL.study_file("{gpu}", "{study}", "stages.parquet"),
    log:
        RL.log("{study}", "stages", "{gpu}.log"),
    benchmark:
        RL.benchmark("stages", "{gpu}", "{study}", "all")
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
    shell:
        "{params.py} -m kernelbook stages {wildcards.study} {output} {input} > {log} 2>&1"


rule bench_gate:
    input:
        build=RL.build_file("{study}", "build.parquet"),
        measurements=RL.study_file("{gpu}", "{study}", "measurements.parquet"),
        profile=RL.study_file("{gpu}", "{study}", "profile.parquet"),
    output:
        RL.study_file("{gpu}", "{study}", "bench.ok"),
    log:
        RL.log("{study}", "bench_gate", "{gpu}.log"),
    benchmark:
        RL.benchmark("bench_gate", "{gpu}", "{study}", "all")
    priority: -10
    conda:
        "../envs/kernelbook.yaml"
    params:
        settings=settings_arg,
        py=PY,
    shell:
        "{params.py} -m kernelbook --settings {params.settings} gate {wildcards.study} "
        "--build {input.build} --measurements {input.measurements} --profile {input.profile} "
        "--out {output} > {log} 2>&1"

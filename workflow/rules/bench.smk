# Bench stage (GPU): check every size against the reference, then time it beside the
# baseline; autotuning candidates reduce to their tuned variant, whose winner at the headline
# then runs at the sizes it was not tuned at (sweep/); one table per study.
# A variant that fails (compile, launch, wrong, crash, hang) is recorded as failed rows and
# its job succeeds, so the study's tables and page are made; the gate of each study then
# fails the run at its end with one line per failure (negative controls that fail as their
# `expect` says pass it).


rule bench:
    input:
        cubin=f"{R}/build/{{study}}/{{variant}}/kernel.cubin",
        build=f"{R}/build/{{study}}/{{variant}}/build.parquet",
    output:
        table=f"{R}/{{gpu}}/{{study}}/bench/{{variant}}.parquet",
        samples=f"{R}/{{gpu}}/{{study}}/samples/bench/{{variant}}.parquet",
    log:
        f"{R}/logs/{{study}}/bench/{{gpu}}/{{variant}}.log",
    benchmark:
        f"{R}/benchmarks/bench/{{gpu}}/{{study}}/{{variant}}.tsv"
    priority: 10
    conda:
        "../envs/kernelbook.yaml"
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


rule select_tuned:
    input:
        candidate_files,
    output:
        f"{R}/{{gpu}}/{{study}}/tuned/{{variant}}.parquet",
    log:
        f"{R}/logs/{{study}}/select/{{gpu}}/{{variant}}.log",
    benchmark:
        f"{R}/benchmarks/select_tuned/{{gpu}}/{{study}}/{{variant}}.tsv"
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
        table=f"{R}/{{gpu}}/{{study}}/sweep/{{variant}}.parquet",
        samples=f"{R}/{{gpu}}/{{study}}/samples/sweep/{{variant}}.parquet",
    log:
        f"{R}/logs/{{study}}/sweep/{{gpu}}/{{variant}}.log",
    benchmark:
        f"{R}/benchmarks/bench_tuned_sweep/{{gpu}}/{{study}}/{{variant}}.tsv"
    priority: 10
    conda:
        "../envs/kernelbook.yaml"
    resources:
        gpu=1,
        gpu_model=GPU_MODEL,
    params:
        spec=variant_spec,
        settings=settings_arg,
        tuned=tuned_arg,
        build_dir=lambda w: f"{R}/build/{w.study}",
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
        f"{R}/{{gpu}}/{{study}}/measurements.parquet",
    log:
        f"{R}/logs/{{study}}/measurements/{{gpu}}.log",
    benchmark:
        f"{R}/benchmarks/measurements/{{gpu}}/{{study}}/all.tsv"
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
        f"{R}/{{gpu}}/device.parquet",
    log:
        f"{R}/logs/device/{{gpu}}.log",
    benchmark:
        f"{R}/benchmarks/device/{{gpu}}/device.tsv"
    priority: 20
    conda:
        "../envs/kernelbook.yaml"
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
        f"{R}/{{gpu}}/{{study}}/samples.parquet",
    log:
        f"{R}/logs/{{study}}/samples/{{gpu}}.log",
    benchmark:
        f"{R}/benchmarks/samples_table/{{gpu}}/{{study}}/all.tsv"
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
        f"{R}/{{gpu}}/{{study}}/stages.parquet",
    log:
        f"{R}/logs/{{study}}/stages/{{gpu}}.log",
    benchmark:
        f"{R}/benchmarks/stages/{{gpu}}/{{study}}/all.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
    shell:
        "{params.py} -m kernelbook stages {wildcards.study} {output} {input} > {log} 2>&1"


rule bench_gate:
    input:
        build=f"{R}/build/{{study}}/build.parquet",
        measurements=f"{R}/{{gpu}}/{{study}}/measurements.parquet",
        profile=f"{R}/{{gpu}}/{{study}}/profile.parquet",
    output:
        f"{R}/{{gpu}}/{{study}}/bench.ok",
    log:
        f"{R}/logs/{{study}}/bench_gate/{{gpu}}.log",
    benchmark:
        f"{R}/benchmarks/bench_gate/{{gpu}}/{{study}}/all.tsv"
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

# Profile and sanitize stages (GPU): Nsight Compute metrics and the roofline per study;
# compute-sanitizer per variant, and a gate that fails on unexplained findings. Both run
# in their own processes, apart from the timing, each within its time limit (timeouts.ncu_s,
# timeouts.sanitizer_s). An autotuned variant is profiled and sanitized through the
# candidate that won at the size in question; a plain one after its bench, which says the
# sizes it failed at: those are not profiled, and a hanging kernel is not sanitized.


rule profile:
    input:
        unpack(checked_inputs),
    output:
        table=f"{R}/{{gpu}}/{{study}}/profile/{{variant}}.parquet",
        reports=directory(f"{R}/{{gpu}}/{{study}}/profile/{{variant}}"),
    log:
        f"{R}/logs/{{study}}/profile/{{gpu}}/{{variant}}.log",
    benchmark:
        f"{R}/benchmarks/profile/{{gpu}}/{{study}}/{{variant}}.tsv"
    priority: 5
    conda:
        "../envs/kernelbook.yaml"
    resources:
        gpu=1,
        gpu_model=GPU_MODEL,
    params:
        spec=variant_spec,
        settings=settings_arg,
        tuned=tuned_arg,
        bench=bench_arg,
        build_dir=lambda w: f"{R}/build/{w.study}",
        py=PY,
    shell:
        "KERNELBOOK_GPU_MODEL={wildcards.gpu} {params.py} -m kernelbook "
        "--settings {params.settings} profile {wildcards.study} "
        "{wildcards.variant} --build-dir {params.build_dir} {params.tuned} {params.bench} "
        "--reports {output.reports} --out {output.table} > {log} 2>&1"


rule profile_table:
    input:
        declared_variants("profile"),
    output:
        f"{R}/{{gpu}}/{{study}}/profile.parquet",
    log:
        f"{R}/logs/{{study}}/profile_table/{{gpu}}.log",
    benchmark:
        f"{R}/benchmarks/profile_table/{{gpu}}/{{study}}/all.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
    shell:
        "{params.py} -m kernelbook gather profile {output} {input} > {log} 2>&1"


rule roofline:
    input:
        profile=f"{R}/{{gpu}}/{{study}}/profile.parquet",
        measurements=f"{R}/{{gpu}}/{{study}}/measurements.parquet",
        device=f"{R}/{{gpu}}/device.parquet",
    output:
        f"{R}/{{gpu}}/{{study}}/roofline.parquet",
    log:
        f"{R}/logs/{{study}}/roofline/{{gpu}}.log",
    benchmark:
        f"{R}/benchmarks/roofline/{{gpu}}/{{study}}/all.tsv"
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
        unpack(checked_inputs),
    output:
        f"{R}/{{gpu}}/{{study}}/sanitize/{{variant}}.parquet",
    log:
        f"{R}/logs/{{study}}/sanitize/{{gpu}}/{{variant}}.log",
    benchmark:
        f"{R}/benchmarks/sanitize/{{gpu}}/{{study}}/{{variant}}.tsv"
    priority: 1
    conda:
        "../envs/kernelbook.yaml"
    resources:
        gpu=1,
        gpu_model=GPU_MODEL,
    params:
        spec=variant_spec,
        settings=settings_arg,
        tuned=tuned_arg,
        bench=bench_arg,
        build_dir=lambda w: f"{R}/build/{w.study}",
        py=PY,
    shell:
        "KERNELBOOK_GPU_MODEL={wildcards.gpu} {params.py} -m kernelbook "
        "--settings {params.settings} sanitize {wildcards.study} "
        "{wildcards.variant} --build-dir {params.build_dir} {params.tuned} {params.bench} "
        "--out {output} > {log} 2>&1"


rule sanitizer_table:
    input:
        declared_variants("sanitize"),
    output:
        f"{R}/{{gpu}}/{{study}}/sanitizer.parquet",
    log:
        f"{R}/logs/{{study}}/sanitizer_table/{{gpu}}.log",
    benchmark:
        f"{R}/benchmarks/sanitizer_table/{{gpu}}/{{study}}/all.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
    shell:
        "{params.py} -m kernelbook gather sanitizer {output} {input} > {log} 2>&1"


rule sanitize_gate:
    input:
        f"{R}/{{gpu}}/{{study}}/sanitizer.parquet",
    output:
        f"{R}/{{gpu}}/{{study}}/sanitize.ok",
    log:
        f"{R}/logs/{{study}}/sanitize_gate/{{gpu}}.log",
    benchmark:
        f"{R}/benchmarks/sanitize_gate/{{gpu}}/{{study}}/all.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        settings=settings_arg,
        py=PY,
    shell:
        "{params.py} -m kernelbook --settings {params.settings} sanitize-gate {wildcards.study} "
        "{input} --out {output} > {log} 2>&1"

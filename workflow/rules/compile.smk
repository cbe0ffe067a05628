# Compile stage (no GPU): nvcc to a cubin, ptxas resources, SASS opcode histogram. A variant
# that does not compile gets a failed build row (nvcc's message), an empty SASS table and an
# empty cubin: its study's tables and page are still made, and the gate fails the run at the
# end (rules build_gate, bench_gate).


rule compile:
    input:
        source=variant_source,
    output:
        cubin=f"{R}/build/{{study}}/{{variant}}/kernel.cubin",
        build=f"{R}/build/{{study}}/{{variant}}/build.parquet",
        sass=f"{R}/build/{{study}}/{{variant}}/sass.parquet",
    log:
        f"{R}/logs/{{study}}/compile/{{variant}}.log",
    benchmark:
        f"{R}/benchmarks/compile/build/{{study}}/{{variant}}.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        spec=variant_spec,
        settings=build_settings_arg,
        py=PY,
    shell:
        "{params.py} -m kernelbook --settings {params.settings} compile {wildcards.study} "
        "{wildcards.variant} --cubin {output.cubin} --build {output.build} --sass {output.sass} "
        "--record-failure > {log} 2>&1"


rule build_table:
    input:
        build_files("build"),
    output:
        f"{R}/build/{{study}}/build.parquet",
    log:
        f"{R}/logs/{{study}}/build_table.log",
    benchmark:
        f"{R}/benchmarks/build_table/build/{{study}}/all.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
    shell:
        "{params.py} -m kernelbook gather build {output} {input} > {log} 2>&1"


rule sass_table:
    input:
        build_files("sass"),
    output:
        f"{R}/build/{{study}}/sass.parquet",
    log:
        f"{R}/logs/{{study}}/sass_table.log",
    benchmark:
        f"{R}/benchmarks/sass_table/build/{{study}}/all.tsv"
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
    shell:
        "{params.py} -m kernelbook gather sass {output} {input} > {log} 2>&1"


rule build_gate:
    input:
        f"{R}/build/{{study}}/build.parquet",
    output:
        f"{R}/build/{{study}}/build.ok",
    log:
        f"{R}/logs/{{study}}/build_gate.log",
    benchmark:
        f"{R}/benchmarks/build_gate/build/{{study}}/all.tsv"
    priority: -10
    conda:
        "../envs/kernelbook.yaml"
    params:
        # what the build depends on, not GPU or timing settings: those rerun no build gate
        settings=build_settings_arg,
        py=PY,
    shell:
        "{params.py} -m kernelbook --settings {params.settings} gate {wildcards.study} "
        "--build {input} --out {output} > {log} 2>&1"

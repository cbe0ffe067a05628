# Compile stage (no GPU): nvcc to a cubin, ptxas resources, SASS opcode histogram. A variant
# that does not compile gets a failed build row (nvcc's message), an empty SASS table and an
# empty cubin: its study's tables and page are still made, and the gate fails the run at the
# end (rules build_gate, bench_gate).


rule compile:
    input:
        source=variant_source,
    output:
        cubin=RL.job_build_file("{study}", "{variant}", "kernel.cubin"),
        build=RL.job_build_file("{study}", "{variant}", "build.parquet"),
        sass=RL.job_build_file("{study}", "{variant}", "sass.parquet"),
    log:
        RL.log("{study}", "compile", "{variant}.log"),
    benchmark:
        RL.benchmark("compile", "build", "{study}", "{variant}")
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
        RL.build_file("{study}", "build.parquet"),
    log:
        RL.log("{study}", "build_table.log"),
    benchmark:
        RL.benchmark("build_table", "build", "{study}", "all")
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
        RL.build_file("{study}", "sass.parquet"),
    log:
        RL.log("{study}", "sass_table.log"),
    benchmark:
        RL.benchmark("sass_table", "build", "{study}", "all")
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
    shell:
        "{params.py} -m kernelbook gather sass {output} {input} > {log} 2>&1"


# Each compiled variant's hot loop from its SASS (kernelbook.build.loops): instructions an
# iteration, their mix and reuse flags, for the page's steps.
rule loop_table:
    input:
        build_files("kernel.cubin"),
    output:
        RL.build_file("{study}", "loops.parquet"),
    log:
        RL.log("{study}", "loop_table.log"),
    benchmark:
        RL.benchmark("loop_table", "build", "{study}", "all")
    conda:
        "../envs/kernelbook.yaml"
    params:
        py=PY,
    shell:
        "{params.py} -m kernelbook loops {wildcards.study} {output} {input} > {log} 2>&1"


rule build_gate:
    input:
        RL.build_file("{study}", "build.parquet"),
    output:
        RL.build_file("{study}", "build.ok"),
    log:
        RL.log("{study}", "build_gate.log"),
    benchmark:
        RL.benchmark("build_gate", "build", "{study}", "all")
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

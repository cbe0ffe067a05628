# kernelbook: from study configs to verified, timed, profiled kernels and their worklogs.
#   snakemake --cores 1 all        everything this machine can do (no GPU: compile only)
#   snakemake --cores 1 tables     only the measured tables (no worklogs): for GPU hosts
# Stages live in workflow/rules/*.smk; logic lives in src/kernelbook, called through its CLI.

from snakemake.utils import min_version

min_version("9.0")


include: "workflow/rules/preflight.smk"


# Validated against src/kernelbook/schemas/config.schema.yaml by kernelbook.config (common.smk),
# which reports a bad key in one line where snakemake.utils.validate prints the schema.
configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/compile.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/analysis.smk"


rule all:
    default_target: True
    input:
        all_targets(),
        worklog_targets(TARGET_GPU),
        gate_targets(),


rule tables:
    input:
        all_targets(),
        gate_targets(),


# The host-timed studies' bench tables alone: a book run makes them before the rest
# (tools/gpu-session.sh), while every core is free.
rule host_timed:
    input:
        host_timed_targets(),


onstart:
    open_run_segment()


onsuccess:
    close_run_segment(kb_runlog.COMPLETE)


onerror:
    close_run_segment(kb_runlog.FAILED)
    # a job the batch scheduler refused (e.g. a GPU no node offers): one line on why
    kb_cluster.explain(log)
    # then what failed, gate by gate: the last thing on screen
    print_gate_summary()

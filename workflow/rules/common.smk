# Shared by every stage: the resolved project, the GPU this machine has, and the input
# functions that turn a study's variants into jobs.

import json
import os
import shlex
import sys
import time
from pathlib import Path
from types import SimpleNamespace

RUN_STARTED = time.time()  # a gate's log older than this run is not this run's word

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from kernelbook import provenance as kb_provenance  # noqa: E402
from kernelbook import runlog as kb_runlog  # noqa: E402
from kernelbook import slurm as kb_cluster  # noqa: E402
from kernelbook import config as kb_config  # noqa: E402
from kernelbook import gpu as kb_gpu  # noqa: E402
from kernelbook import layout as kb_layout  # noqa: E402
from kernelbook import tables as kb_tables  # noqa: E402
from kernelbook import tune as kb_tune  # noqa: E402

# What the config came from, as its errors name it: the files, and --config if it was given.
CONFIG_SOURCE = ", ".join(str(f) for f in workflow.configfiles) or "config"
if workflow.config_settings.overwrite_config:
    CONFIG_SOURCE += " with --config"
# The config and every study are validated here (against src/kernelbook/schemas, and every
# variant's launch at every size it claims); a bad one stops the run with one line naming
# file, variant and key, not a Python traceback.
try:
    PROJECT = kb_config.load_project(
        config, root=workflow.basedir, source=CONFIG_SOURCE
    )
except kb_config.ConfigError as e:
    print(f"kernelbook: {e}", file=sys.stderr)
    sys.exit(1)
SETTINGS = PROJECT.settings
R = SETTINGS["results"]
RL = kb_layout.Results(R)  # every results/ path (kernelbook.layout)
PY = sys.executable

if SETTINGS["gpu"] == "none":
    GPU, NO_GPU_WHY = None, "config says gpu: none"
else:
    GPU, NO_GPU_WHY = kb_gpu.detect()
GPU_SLUG = GPU.slug if GPU else "none"

# gpu_model (e.g. --config gpu_model=h100) picks the GPU model to measure on, whatever this
# host has: its GPU jobs ask the executor for that model (the SLURM plugin's gpu_model), and
# write results/<gpu_model>/. Each GPU job checks that the GPU it got is of that model.
GPU_MODEL = SETTINGS.get("gpu_model") or ""
if GPU_MODEL:
    if SETTINGS["gpu"] == "none":
        raise WorkflowError(
            f"config: gpu: none and gpu_model: {GPU_MODEL} contradict each other "
            "(gpu_model asks for the GPU stages, gpu: none skips them); drop one"
        )
    GPU_SLUG = kb_gpu.slug(GPU_MODEL)
# The <gpu> this run measures on (results/<gpu>/...), or None: compile and render only.
TARGET_GPU = GPU_SLUG if (GPU or GPU_MODEL) else None

# GPU jobs at once on this machine: --resources gpu=N where given, else one a GPU of those
# NVML lists (narrowed by CUDA_VISIBLE_DEVICES; each job then locks its own by UUID): one GPU
# or several, the same path. On a cluster the scheduler hands out the GPUs, not this count.
if "gpu" not in workflow.resource_settings.resources and workflow.local_exec:
    workflow.register_resource("gpu", GPU.count if GPU else 1)

if TARGET_GPU is None:
    print(
        f"kernelbook: no GPU here ({NO_GPU_WHY}): compiling only; bench, device, profile and "
        f"sanitize skipped for {', '.join(PROJECT.studies)}",
        file=sys.stderr,
    )


wildcard_constraints:
    study=r"[a-z][a-z0-9_]*",
    variant=r"[A-Za-z0-9][A-Za-z0-9_]*",
    gpu=r"[a-z0-9-]+",


def study_of(wildcards):
    return PROJECT.study(wildcards.study)


def variant_of(wildcards):
    return study_of(wildcards).variant(wildcards.variant)


def variant_source(wildcards):
    """The variant's source and the headers it includes with quotes: editing either
    recompiles it."""
    source = variant_of(wildcards).source
    return [source, *(str(p) for _, p in kb_provenance.quoted_includes(Path(source)))]


def variant_spec(wildcards):
    """The resolved config entry: a change reruns this variant's jobs, and only those."""
    return json.dumps(variant_of(wildcards).spec(), sort_keys=True)


# A job's request for "every core": those Snakemake may use, at most this machine's (a
# cluster run's --jobs leaves workflow.cores unbounded).
def _all_cores():
    try:
        cores = workflow.cores or 1
    except Exception:  # no --cores (snakemake --report): nothing runs
        cores = 1
    return max(1, min(cores, os.cpu_count() or 1))


ALL_CORES = _all_cores()


def _host_timed(wildcards) -> bool:
    """Whether the job's study times the host (timing.method host: the regimes study)."""
    study = PROJECT.studies.get(wildcards.study)
    return bool(study and study.timing.get("method") == "host")


def host_timed_threads(wildcards):
    """Every core for a job that times the host: nothing else of the run (nvcc, another
    job's start-up) competes for the CPU it times."""
    return ALL_CORES if _host_timed(wildcards) else 1


def host_timed_targets():
    """The bench tables of the studies that time the host (target ``host_timed``): a book run
    makes them first, alone (tools/gpu-session.sh). Each of their jobs needs every core, and
    once other jobs hold some, the scheduler fills each core freed with another 1-core job: an
    H200 book run (b12f559) cut at 25.7 min had not started one of them."""
    if not TARGET_GPU:
        return []
    return [
        table
        for name in PROJECT.studies
        if _host_timed(SimpleNamespace(study=name))
        for table in bench_files(SimpleNamespace(gpu=TARGET_GPU, study=name))
    ]


def host_timed_priority(wildcards):
    """A job that times the host runs as soon as it is ready: it needs every core, and at a
    lower priority the scheduler keeps filling the cores with other studies' 1-core profile
    and sanitize jobs, so each host-timed job waited for a drain (an H200 run: the regimes
    study's 7 bench jobs, 75 s of job time, spanned 212 s from the first's start to the
    last's end). Above any sum of the other GPU jobs' priorities (four slots a GPU)."""
    return 100 if _host_timed(wildcards) else 10


def settings_arg(wildcards):
    """Global settings for one study's jobs, passed to the CLI as JSON."""
    return shlex.quote(
        json.dumps({**SETTINGS, "studies": [wildcards.study]}, sort_keys=True)
    )


BUILD_KEYS = ("arch", "nvcc_flags", "study_dir", "results")


def build_settings_arg(wildcards):
    """Only what changes a build: timing or GPU settings must not recompile anything."""
    keep = {k: SETTINGS[k] for k in BUILD_KEYS}
    return shlex.quote(
        json.dumps({**keep, "studies": [wildcards.study]}, sort_keys=True)
    )


def published_measurements(study):
    """The measurements tables published for a study, on every GPU."""
    return [
        kb_tables.read(
            kb_layout.published_paths(kb_layout.WORKLOGS, gpu, name)["measurements"]
        )
        for gpu, name in kb_layout.published()
        if name == study
    ]


def compiled_jobs(study):
    """What a study compiles: every variant and candidate with a GPU (or with
    candidates_without_gpu: all); without one, a tuned variant's candidates that the
    published pages show (kernelbook.tune.used_candidates)."""
    s = PROJECT.study(study)
    if TARGET_GPU or SETTINGS["candidates_without_gpu"] == "all":
        return [v.id for v in s.jobs()]
    return kb_tune.jobs_without_gpu(s, published_measurements(study))


JOBS = {name: compiled_jobs(name) for name in PROJECT.studies}


def job_ids(study):
    return JOBS[study]


if TARGET_GPU is None:
    _all = sum(len(PROJECT.study(n).candidates) for n in PROJECT.studies)
    _used = sum(
        len(JOBS[n]) - sum(not v.is_tuned for v in PROJECT.study(n).variants)
        for n in PROJECT.studies
    )
    if _used < _all:
        print(
            f"kernelbook: of the tuned variants' {_all} candidates, the {_used} that the "
            "published pages show are compiled (candidates_without_gpu: all compiles every "
            "one; a GPU run compiles and benches them all)",
            file=sys.stderr,
        )


def build_files(kind):
    """A study's per-job build files: ``kind``.parquet (build, sass), or a file name."""
    name = kind if "." in kind else f"{kind}.parquet"

    def inputs(wildcards):
        return [
            RL.job_build_file(wildcards.study, v, name)
            for v in job_ids(wildcards.study)
        ]

    return inputs


def bench_files(wildcards):
    """Per-job measurement tables of a study: plain variants, tuned variants' picks and sweeps."""
    study = study_of(wildcards)
    out = []
    for v in study.variants:
        sub = "tuned" if v.is_tuned else "bench"
        out.append(RL.job_table(wildcards.gpu, wildcards.study, sub, v.id))
        if v.is_tuned:  # its own job: winners confirmed, the sweep
            out.append(RL.job_table(wildcards.gpu, wildcards.study, "sweep", v.id))
    return out


# Problems whose measurements carry the three-term prediction (kernelbook.report.prediction): their
# measurements table is gathered with the device table and study.json.
PREDICTED_PROBLEMS = ("regimes",)


def measurement_inputs(wildcards):
    named = {"bench": bench_files(wildcards)}
    if study_of(wildcards).problem in PREDICTED_PROBLEMS:
        named["device"] = RL.device_table(wildcards.gpu)
        named["meta"] = RL.build_file(wildcards.study, "study.json")
    return named


def predict_arg(wildcards, input):
    if "device" not in input.keys():
        return ""
    return f"--device {shlex.quote(input.device)} --meta {shlex.quote(input.meta)}"


def samples_files(wildcards):
    """Raw samples of every bench job of a study: variants, candidates, tuned sweeps."""
    study = study_of(wildcards)
    gpu, name = wildcards.gpu, wildcards.study
    out = []
    for v in study.variants:
        if v.is_tuned:
            out.append(RL.samples_table(gpu, name, "candidates", v.id))
            out.append(RL.samples_table(gpu, name, "sweep", v.id))
        else:
            out.append(RL.samples_table(gpu, name, "bench", v.id))
    return out


def stage_benchmarks(wildcards):
    """Snakemake's benchmark files of the jobs a study's measured tables come from."""
    study = study_of(wildcards)
    gpu, name = wildcards.gpu, wildcards.study
    out = [RL.benchmark("compile", "build", name, v) for v in job_ids(name)]
    out += [
        RL.benchmark(r, "build", name, "all")
        for r in ("build_table", "sass_table", "loop_table")
    ]
    for v in study.variants:
        if v.is_tuned:
            out.append(RL.benchmark("bench_candidates", gpu, name, v.id))
            out.append(RL.benchmark("select_tuned", gpu, name, v.id))
            out.append(RL.benchmark("bench_tuned_sweep", gpu, name, v.id))
        else:
            out.append(RL.benchmark("bench", gpu, name, v.id))
    out += [
        RL.benchmark(r, gpu, name, "all")
        for r in ("measurements", "samples_table", "profile", "roofline", "sanitize")
    ]
    out.append(RL.device_benchmark(gpu))
    return out


def candidate_builds(wildcards):
    """What a tuned variant's candidates job reads: every candidate's cubin and build row
    (a failed compile is a build row too: the candidate's rows say why)."""
    v = variant_of(wildcards)
    if not v.is_tuned:
        raise WorkflowError(
            f"{wildcards.study}/{wildcards.variant} is not autotuned: no candidates to bench"
        )
    return {
        "cubins": [
            RL.job_build_file(wildcards.study, c, "kernel.cubin") for c in v.candidates
        ],
        "builds": [
            RL.job_build_file(wildcards.study, c, "build.parquet") for c in v.candidates
        ],
    }


def tuned_inputs(wildcards):
    v = variant_of(wildcards)
    if v.is_tuned:
        return {
            "tuned": RL.job_table(wildcards.gpu, wildcards.study, "tuned", v.id),
            "cubins": [
                RL.job_build_file(wildcards.study, c, "kernel.cubin")
                for c in v.candidates
            ],
        }
    return {"cubin": RL.job_build_file(wildcards.study, v.id, "kernel.cubin")}


def study_checked_inputs(wildcards):
    """What a study's profile and sanitize jobs read: what the bench found correct, each
    plain variant's bench table (sizes it failed at are not run again) and cubin, each tuned
    variant's tuned table (its winners) and its candidates' cubins."""
    named = {"bench": [], "tuned": [], "cubins": []}
    for v in study_of(wildcards).variants:
        if v.is_tuned:
            named["tuned"].append(
                RL.job_table(wildcards.gpu, wildcards.study, "tuned", v.id)
            )
            named["cubins"] += [
                RL.job_build_file(wildcards.study, c, "kernel.cubin")
                for c in v.candidates
            ]
        else:
            named["bench"].append(
                RL.job_table(wildcards.gpu, wildcards.study, "bench", v.id)
            )
            named["cubins"].append(
                RL.job_build_file(wildcards.study, v.id, "kernel.cubin")
            )
    return named


def tuned_arg(wildcards):
    v = variant_of(wildcards)
    if not v.is_tuned:
        return ""
    return (
        f"--tuned-table {RL.job_table(wildcards.gpu, wildcards.study, 'tuned', v.id)}"
    )


def gate_targets():
    """One gate per study: with a GPU the bench gate (compile failures included), else the
    build gate; each fails, after the tables are made, when something failed unexpectedly.
    """
    if TARGET_GPU:
        return [RL.study_file(TARGET_GPU, name, "bench.ok") for name in PROJECT.studies]
    return [RL.build_file(name, "build.ok") for name in PROJECT.studies]


def all_targets():
    targets = []
    for name in PROJECT.studies:
        targets += [
            RL.build_file(name, "build.parquet"),
            RL.build_file(name, "sass.parquet"),
            RL.build_file(name, "loops.parquet"),
        ]
        if TARGET_GPU:
            targets += [
                RL.study_file(TARGET_GPU, name, "measurements.parquet"),
                RL.device_table(TARGET_GPU),
                *(
                    RL.study_file(TARGET_GPU, name, f)
                    for f in (
                        "profile.parquet",
                        "roofline.parquet",
                        "sanitizer.parquet",
                        "sanitize.ok",
                        "samples.parquet",
                        "stages.parquet",
                    )
                ),
            ]
    return targets


def gate_logs():
    """(output, log) of every gate of this run, as the gate rules name them."""
    if not GPU:
        return [
            (RL.build_file(n, "build.ok"), RL.log(n, "build_gate.log"))
            for n in PROJECT.studies
        ]
    return [
        (
            RL.study_file(GPU_SLUG, n, f"{gate}.ok"),
            RL.log(n, f"{gate}_gate", f"{GPU_SLUG}.log"),
        )
        for n in PROJECT.studies
        for gate in ("bench", "sanitize")
    ]


def print_gate_summary():
    """At the end of a failed run: what each failed gate said, on one screen."""
    said = []
    for ok, log in gate_logs():
        fresh = Path(log).is_file() and Path(log).stat().st_mtime >= RUN_STARTED
        if not Path(ok).exists() and fresh:
            text = Path(log).read_text().strip()
            if text:
                said.append(text.removeprefix("kernelbook: error: "))
    if said:
        print(
            "\nkernelbook: the run's gates failed:\n" + "\n".join(said), file=sys.stderr
        )


# The run's own record (kernelbook.runlog): a measuring run's segment opens at the start
# and closes at the end; one cut short stays open and reads as cut.
RUN_SEGMENT = {}


def open_run_segment():
    if TARGET_GPU:
        RUN_SEGMENT["path"] = kb_runlog.begin(
            RL.runs_dir(TARGET_GPU),
            kb_provenance.git_commit(workflow.basedir),
            list(GPU.uuids) if GPU else [],
            (
                [str(t) for t in workflow.dag.targetfiles]
                if hasattr(workflow, "dag")
                else []
            ),
            list(PROJECT.studies),
        )


def close_run_segment(status):
    if "path" in RUN_SEGMENT:
        kb_runlog.end(RUN_SEGMENT.pop("path"), status)

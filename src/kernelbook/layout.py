"""Every path of results/ and worklogs/: the rules, the library and the tools compose them here.

A path's parts may be Snakemake wildcards (``"{gpu}"``, ``"{study}"``, ``"{variant}"``): the
functions only join strings, so the same call gives a rule's pattern and a job's file.

    results/build/<study>/<variant>/{kernel.cubin,build.parquet,sass.parquet}   per job, no GPU
    results/build/<study>/{build,sass,loops}.parquet, study.json, build.ok       per study
    results/<gpu>/device.parquet                                                 per GPU
    results/<gpu>/<study>/<table>.parquet, bench.ok, sanitize.ok, worklog.md ... per study
    results/<gpu>/<study>/<kind>/<variant>.parquet          per job (bench, tuned, sweep, ...)
    results/<gpu>/<study>/samples/<kind>/<variant>.parquet  raw samples of a bench job
    results/logs/<study>/...      results/benchmarks/<rule>/<gpu or build>/<study>/<job>.tsv
    worklogs/<gpu>/<study>/{README.md,worklog.html,figures/,data/*.parquet,data/study.json}
"""

from __future__ import annotations

from pathlib import Path

RESULTS = "results"
WORKLOGS = "worklogs"
BUILD = "build"  # results/build/: what is built without a GPU, per study
LOGS = "logs"
BENCHMARKS = "benchmarks"

# The tables a page is made from, as published in worklogs/<gpu>/<study>/data/.
DATA_TABLES = (
    "measurements",
    "device",
    "build",
    "sass",
    "loops",
    "profile",
    "roofline",
    "sanitizer",
    "samples",
    "stages",
)


def _join(*parts) -> str:
    return "/".join(str(p).rstrip("/") for p in parts)


# -- results/build/: no GPU --------------------------------------------------------------


def build_dir(study: str, results: str | Path = RESULTS) -> str:
    return _join(results, BUILD, study)


def build_file(study: str, name: str, results: str | Path = RESULTS) -> str:
    """A study's build-side file: build.parquet, sass.parquet, study.json, build.ok."""
    return _join(results, BUILD, study, name)


def job_build_file(study: str, variant: str, name: str, results: str | Path = RESULTS) -> str:
    """One compile job's file: kernel.cubin, build.parquet, sass.parquet."""
    return _join(results, BUILD, study, variant, name)


# -- results/<gpu>/: measured --------------------------------------------------------------


def device_table(gpu: str, results: str | Path = RESULTS) -> str:
    return _join(results, gpu, "device.parquet")


def runs_dir(gpu: str, results: str | Path = RESULTS) -> str:
    """The run's segment records (kernelbook.runlog): one file per Snakemake invocation."""
    return _join(results, gpu, "runs")


def study_dir(gpu: str, study: str, results: str | Path = RESULTS) -> str:
    return _join(results, gpu, study)


def study_file(gpu: str, study: str, name: str, results: str | Path = RESULTS) -> str:
    """A study's measured file: measurements.parquet, bench.ok, worklog.md, figures ..."""
    return _join(results, gpu, study, name)


# The report of a study's one ncu run (kernelbook.profile.ncu.profile_study), in its profile
# job's reports folder; each variant's own runs, where that one fails, write under
# <reports>/<variant>/.
STUDY_PROFILE_REPORT = "study"
# The report of the study's torch and several-kernel variants, all in one ncu run
# (kernelbook.profile.ncu: their kernels told apart by NVTX range), beside it.
RANGED_PROFILE_REPORT = "ranged"
# The profile rows (and launch-plan entries) of a study's baseline, profiled beside its
# variants (kernelbook.launch.process.BaselineRun): this prefix and the baseline's name.
BASELINE_PREFIX = "baseline:"


def job_dir(gpu: str, study: str, kind: str, results: str | Path = RESULTS) -> str:
    """The folder of one kind of job table (bench, tuned, ...): what job_table names in."""
    return _join(results, gpu, study, kind)


def job_table(gpu: str, study: str, kind: str, variant: str, results: str | Path = RESULTS) -> str:
    """One job's table: kind is bench, tuned, sweep, profile, roofline or sanitize."""
    return _join(results, gpu, study, kind, f"{variant}.parquet")


def samples_dir(gpu: str, study: str, results: str | Path = RESULTS) -> str:
    return _join(results, gpu, study, "samples")


def samples_table(
    gpu: str, study: str, kind: str, variant: str, results: str | Path = RESULTS
) -> str:
    """The raw samples of one bench job (kind: bench or sweep)."""
    return _join(results, gpu, study, "samples", kind, f"{variant}.parquet")


def job_file(gpu: str, study: str, kind: str, name: str, results: str | Path = RESULTS) -> str:
    """Any other per-job file of a measured study (a kept .ncu-rep, a sanitizer log)."""
    return _join(results, gpu, study, kind, name)


# -- results/logs/ and results/benchmarks/ ---------------------------------------------------


def log(study: str, *parts: str, results: str | Path = RESULTS) -> str:
    """results/logs/<study>/<parts...>: the last part carries its own suffix."""
    return _join(results, LOGS, study, *parts)


def run_log(*parts: str, results: str | Path = RESULTS) -> str:
    """A log of the whole run, not of one study (publish.log, device/<gpu>.log)."""
    return _join(results, LOGS, *parts)


def benchmarks_dir(results: str | Path = RESULTS) -> str:
    return _join(results, BENCHMARKS)


def benchmark(rule: str, side: str, study: str, job: str, results: str | Path = RESULTS) -> str:
    """Snakemake's benchmark file of one job: side is the <gpu>, or 'build' for no-GPU rules;
    job is the variant, or 'all' for a study's aggregate."""
    return _join(results, BENCHMARKS, rule, side, study, f"{job}.tsv")


def device_benchmark(gpu: str, results: str | Path = RESULTS) -> str:
    """The device job's benchmark file (one a GPU, of no study)."""
    return _join(results, BENCHMARKS, "device", gpu, "device.tsv")


# -- the tables a page is made from --------------------------------------------------------


def result_paths(results: str | Path, gpu: str, study: str) -> dict[str, Path]:
    """Where a measuring run keeps a study's tables and its rendered worklog."""
    return {
        "measurements": Path(study_file(gpu, study, "measurements.parquet", results)),
        "device": Path(device_table(gpu, results)),
        "build": Path(build_file(study, "build.parquet", results)),
        "sass": Path(build_file(study, "sass.parquet", results)),
        "loops": Path(build_file(study, "loops.parquet", results)),
        **{
            name: Path(study_file(gpu, study, f"{name}.parquet", results))
            for name in ("profile", "roofline", "sanitizer", "samples", "stages")
        },
        "meta": Path(build_file(study, "study.json", results)),
        "run": Path(study_file(gpu, study, "run.json", results)),
        "md": Path(study_file(gpu, study, "worklog.md", results)),
        "html": Path(study_file(gpu, study, "worklog.html", results)),
        "figures": Path(study_file(gpu, study, "figures", results)),
    }


# -- worklogs/: published ------------------------------------------------------------------


def published_dir(gpu: str, study: str, worklogs: str | Path = WORKLOGS) -> str:
    return _join(worklogs, gpu, study)


def published_paths(worklogs: str | Path, gpu: str, study: str) -> dict[str, Path]:
    """Where a published study keeps the same things."""
    here = Path(published_dir(gpu, study, worklogs))
    out = {name: here / "data" / f"{name}.parquet" for name in DATA_TABLES}
    out.update(
        meta=here / "data" / "study.json",
        run=here / "data" / "run.json",
        md=here / "README.md",
        html=here / "worklog.html",
        figures=here / "figures",
    )
    return out


def published(worklogs: str | Path = WORKLOGS) -> list[tuple[str, str]]:
    """(gpu, study) of every published study: a folder with data/measurements.parquet."""
    root = Path(worklogs)
    if not root.is_dir():
        return []
    return sorted(
        (p.parent.parent.parent.name, p.parent.parent.name)
        for p in root.glob("*/*/data/measurements.parquet")
    )


def index_page(worklogs: str | Path = WORKLOGS) -> Path:
    return Path(worklogs) / "README.md"


_RESULT_PATHS = frozenset(
    {
        "build_dir",
        "build_file",
        "job_dir",
        "job_build_file",
        "device_table",
        "runs_dir",
        "benchmarks_dir",
        "study_dir",
        "study_file",
        "job_table",
        "samples_dir",
        "samples_table",
        "job_file",
        "log",
        "run_log",
        "benchmark",
        "device_benchmark",
    }
)


class Results:
    """The results/ paths of one results folder (config ``results``): ``Results(r).bench``
    is ``bench(..., results=r)``, as the rules use them."""

    def __init__(self, root: str | Path = RESULTS):
        self.root = str(root)

    def __getattr__(self, name: str):
        if name not in _RESULT_PATHS:
            raise AttributeError(name)
        fn = globals()[name]
        return lambda *parts: fn(*parts, results=self.root)

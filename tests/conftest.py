"""Shared fixtures of the CPU suite: the repository, temporary copies of it, subprocess helpers.

Nothing here needs a GPU. The Snakemake and CLI tests run in a copy of the repository under
pytest's tmp_path, with PYTHONPATH pointing at the copy's src, so the pipeline's jobs import
the copied kernelbook and write only into the copy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kernelbook import tables

REPO = Path(__file__).resolve().parents[1]
_CUBINS = pytest.StashKey[str]()


def pytest_configure(config):
    """Without a GPU the job server (kernelbook.jobserver) is off, unless the caller set
    it: a CPU test's GPU verbs only fail with NoGpu, and a server per repository copy would
    import torch again for each (tests/test_jobserver.py turns it on for itself).

    One content-hashed cubin cache (kernelbook.build.CACHE_ENV) for the whole run: each
    kernel is compiled by nvcc once, then reused by every test, every xdist worker and every
    pipeline job the tests start (they inherit the environment); the staleness check's
    same-code answers (kernelbook.build.samecode) beside it. Removed at the end."""
    from kernelbook import gpu, jobserver
    from kernelbook.build import nvcc as build
    from kernelbook.build import samecode

    if jobserver.ENV not in os.environ and gpu.detect()[0] is None:
        os.environ[jobserver.ENV] = "0"
    if hasattr(config, "workerinput") or os.environ.get(build.CACHE_ENV):
        return  # an xdist worker (the controller made it), or a cache the caller chose
    path = tempfile.mkdtemp(prefix="kernelbook-test-cubins-")
    os.environ[build.CACHE_ENV] = path
    os.environ.setdefault(samecode.CACHE_ENV, os.path.join(path, "same-code"))
    config.stash[_CUBINS] = path


def pytest_unconfigure(config):
    from kernelbook.build import nvcc as build

    path = config.stash.get(_CUBINS, None)
    if path:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(build.CACHE_ENV, None)


# What a checkout needs to run the pipeline (results/, .snakemake/ and caches stay behind).
COPY_ITEMS = ("Snakefile", "workflow", "config", "kernels", "profiles", "src")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc", ".snakemake", "results")


def candidate_sample(study: str, vid: str) -> list[str]:
    """A tuned variant through its first, middle and last candidate (each is its own job):
    the GPU tests run these rather than every point of the space."""
    from kernelbook import config

    p = config.load_project_file(REPO / "config" / "config.yaml", overrides={"studies": [study]})
    c = p.study(study).variant(vid).candidates
    return sorted({c[0], c[len(c) // 2], c[-1]})


def pairwise_picks(candidates: list[str], factors) -> list[str]:
    """Candidates that together show every pair of factor values the space holds (each
    candidate's ``factors(c)``: {name: value}), picked greedily, in the space's order of
    first use: an emulator test then meets every two-way interaction of the defines, at a
    fraction of the candidates."""
    import itertools

    def pairs(c):
        return set(itertools.combinations(sorted(factors(c).items()), 2))

    need = set().union(*(pairs(c) for c in candidates)) if candidates else set()
    picks = []
    while need:
        best = max(candidates, key=lambda c: len(pairs(c) & need))  # the first of the best
        picks.append(best)
        need -= pairs(best)
    return sorted(picks, key=candidates.index)


# Fixtures that run the whole pipeline: their tests are the long end-to-end ones, marked
# slow (the quick suite: -m "not slow"), and each group runs on one xdist worker, so that the
# session fixture is made once (pytest -n auto --dist loadgroup).
END_TO_END = {"built_repo": "built", "clone_built": "built", "rendered": "rendered"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        groups = sorted({END_TO_END[f] for f in item.fixturenames if f in END_TO_END})
        if groups:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group(groups[0]))
        elif "built" in item.fixturenames:  # a module's kernels, compiled once, on one worker
            item.add_marker(pytest.mark.xdist_group(f"built:{item.module.__name__}"))
        elif "bench_batch" in item.fixturenames:  # one bench process for a module's variants
            item.add_marker(pytest.mark.xdist_group(f"batch:{item.module.__name__}"))
    # The GPU tiers: `-m gpu` is the quick one; the whole Snakemake runs of the failure
    # controls (gpu and slow) wait for `-m "gpu and slow"` (or a plain `pytest`), skipped
    # visibly, never deselected in silence.
    if config.option.markexpr.strip() == "gpu":
        later = pytest.mark.skip(reason="the slow GPU tier: run it with -m 'gpu and slow'")
        for item in items:
            if "slow" in item.keywords and "gpu" in item.keywords:
                item.add_marker(later)


def copy_repo(dest: Path) -> Path:
    """Copy what the pipeline needs from the real repository into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for item in COPY_ITEMS:
        src = REPO / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=_IGNORE)
        else:
            shutil.copy2(src, dest / item)
    return dest


def copy_env(root: Path) -> dict[str, str]:
    """Environment under which `python -m kernelbook` imports the copy at ``root``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("SNAKEMAKE_PROFILE", None)
    return env


def run_in(root: Path, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python <args>`` in ``root`` with the copy's src first on the path."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=root,
        env=copy_env(root),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def snakemake(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_in(root, ["-m", "snakemake", *args], timeout=timeout)


def kernelbook_cli(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_in(root, ["-m", "kernelbook", *args], timeout=timeout)


_RULE = re.compile(r"^(?:local)?rule (\w+):\s*$")
_WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")


def planned_jobs(output: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, wildcards) of every job a dry run (-n) lists."""
    jobs: list[tuple[str, dict[str, str]]] = []
    for line in output.splitlines():
        m = _RULE.match(line)
        if m:
            jobs.append((m.group(1), {}))
            continue
        m = _WILDCARDS.match(line)
        if m and jobs:
            for pair in m.group(1).split(", "):
                k, _, v = pair.partition("=")
                jobs[-1][1][k.strip()] = v.strip()
    return jobs


# `-n auto` (addopts) where a GPU is and the run selects GPU tests (`-m gpu`, `-m "gpu and
# slow"`): GPU_WORKERS workers, not one a core. The GPU is shared one job at a time (its
# lock), so more workers only add start-ups that wait for it; the README's quick-tier time is
# of these 4. Anywhere else xdist's own default (one a core).
GPU_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    expr = config.getoption("markexpr", "") or ""
    if re.search(r"(?<!not )\bgpu\b", expr) and has_gpu():
        return GPU_WORKERS
    return None


def has_gpu() -> bool:
    try:
        from kernelbook import gpu

        return gpu.detect()[0] is not None
    except Exception:
        return False


def compile_variants(
    tmp_path_factory, name: str, variants, arch="sm_90", flags=("-O3", "-lineinfo")
):
    """nvcc of every one of ``variants`` (two at a time) into a fresh folder: {id: BuildResult};
    the test is skipped where nvcc is missing."""
    from concurrent.futures import ThreadPoolExecutor

    from kernelbook.build import nvcc as build

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    out = tmp_path_factory.mktemp(name)

    def one(v):
        return v.id, build.compile_variant(v, arch, list(flags), REPO, out / v.id / "kernel.cubin")

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, variants))


def gpu_test_kernels():
    """(project, study, variant) of every CUDA kernel the GPU tests build: each study's plain
    variants and its tuned variants' candidate samples (candidate_sample)."""
    from kernelbook import config
    from kernelbook.config import ConfigError

    for path in sorted((REPO / "config" / "studies").glob("*.yaml")):
        try:
            project = config.load_project_file(
                REPO / "config" / "config.yaml", overrides={"studies": [path.stem]}
            )
            study = project.study(path.stem)
        except ConfigError:
            continue  # a study the project does not load is its own tests' concern
        ids = [v.id for v in study.variants if not v.is_tuned]
        for v in study.variants:
            if v.is_tuned:
                ids += candidate_sample(path.stem, v.id)
        for vid in ids:
            variant = study.variant(vid)
            if variant.kind == "cuda":
                yield project, study, variant


AHEAD_MIN = 10  # GPU tests selected before every kernel is compiled ahead


@pytest.fixture(scope="session", autouse=True)
def _gpu_kernels_compiled_ahead(request):
    """Where GPU tests run on a GPU: every kernel they build, compiled first by nvcc on every
    core at once into the run's cubin cache (kernelbook.build.CACHE_ENV). Each test's own
    build, one at a time inside its GPU job, then takes the cubin from the cache instead of
    holding the GPU through nvcc. A kernel that fails to compile here fails again, with its
    message, in its own test. Without a GPU, or with fewer than AHEAD_MIN GPU tests selected
    (one test run by hand builds only its own kernels), nothing runs."""
    import fcntl
    from concurrent.futures import ThreadPoolExecutor

    from kernelbook.build import nvcc as build
    from kernelbook.build.job import compile_now

    cache = os.environ.get(build.CACHE_ENV)
    selected = sum("gpu" in i.keywords for i in request.session.items)
    if not cache or selected < AHEAD_MIN or not has_gpu():
        return
    with open(Path(cache) / ".compiled-ahead", "a+") as mark:
        fcntl.flock(mark, fcntl.LOCK_EX)  # xdist workers: the first compiles, the rest wait
        mark.seek(0)
        if mark.read():
            return
        kernels = list(gpu_test_kernels())
        with tempfile.TemporaryDirectory() as tmp:

            def one(i_job):
                i, (project, study, variant) = i_job
                try:
                    compile_now(project, study, variant, Path(tmp) / f"{i}.cubin")
                except Exception:  # noqa: BLE001 - its own test reports it
                    return 0
                return 1

            with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
                built = sum(pool.map(one, enumerate(kernels)))
        mark.write(f"{built} of {len(kernels)} kernels\n")


@pytest.fixture(autouse=True)
def _gpu_held_through_the_test(request):
    """A test marked gpu_exclusive holds the GPU's lock from start to end, as a timing job
    does: the GPU tier runs on xdist workers side by side (each kernelbook job takes the lock
    for itself), and a test that times in its own process, or runs a tool that takes no
    lock, must not share the GPU with them. Its own kernelbook jobs run under its lock
    (gpu.SLOT_HELD_ENV). CUDA_VISIBLE_DEVICES comes back as it was."""
    if request.node.get_closest_marker("gpu_exclusive") is None or not has_gpu():
        yield
        return
    from kernelbook import gpu

    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    slot = gpu.acquire_slot(preload=())
    os.environ[gpu.SLOT_HELD_ENV] = "1"
    try:
        yield
    finally:
        del os.environ[gpu.SLOT_HELD_ENV]
        if slot.lock is not None:
            slot.lock.close()
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """A fresh copy of the repository (no results) for one test."""
    return copy_repo(tmp_path / "repo")


@pytest.fixture(scope="session")
def nogpu_args() -> list[str]:
    """Extra snakemake arguments that keep a run compile-only, also on a machine with a GPU."""
    return ["--config", "gpu=none"] if has_gpu() else []


@pytest.fixture(scope="session")
def built_repo(tmp_path_factory):
    """A copy of the repository after one real `snakemake --cores 2 all --config gpu=none`
    (compile only, GPU or not): every kernel of every study.

    Returns (root, completed process). Tests that change files must work on a copy of it
    (``clone_built``), since other tests read it.
    """
    root = copy_repo(tmp_path_factory.mktemp("built") / "repo")
    proc = snakemake(root, "--cores", "2", "all", "--config", "gpu=none", timeout=900)
    return root, proc


@pytest.fixture
def clone_built(built_repo, tmp_path):
    """A copy of the built repository (results and Snakemake metadata included)."""
    root, proc = built_repo
    if proc.returncode != 0:
        pytest.fail(f"the initial pipeline run failed:\n{proc.stdout}\n{proc.stderr}")
    dest = tmp_path / "repo"
    shutil.copytree(root, dest, symlinks=True)
    return dest


@pytest.fixture
def numpy_as_cupy(monkeypatch):
    """Problem.check imports cupy inside; let it find NumPy, whose API it uses."""
    import numpy as np

    monkeypatch.setitem(sys.modules, "cupy", np)
    return np


def assert_checked(row) -> None:
    """A bench row that ran, its kernel correct within the tolerance, and its baseline too:
    the row's status, size and reason in the message where it did not run."""
    assert row["status"] == "ok", row[["size", "status", "reason"]].to_dict()
    assert row["correct"] and row["rel_err"] < row["tolerance"], row["rel_err"]
    assert row["baseline_rel_err"] < row["tolerance"], row["baseline_rel_err"]


@pytest.fixture
def cpu_torch(monkeypatch, numpy_as_cupy):
    """The baselines' own code on PyTorch's CPU kernels: the tensor factories' device='cuda'
    dropped, no syncs; NumPy stands in for CuPy."""
    torch = pytest.importorskip("torch")

    def on_host(factory):
        return lambda *a, device=None, **kw: factory(*a, **kw)

    for name in ("as_tensor", "tensor", "empty", "zeros", "ones", "full", "arange"):
        monkeypatch.setattr(torch, name, on_host(getattr(torch, name)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **kw: None)
    return torch


# The timing of the GPU tests that check values and a table's columns, not times: a size's
# measurement stops once 10 ms have passed and every median is known to 5 % (the book's
# 0.5 % can keep a noisy microsecond kernel sampling until max_time_s), at 0.5 s at most.
CHECK_TIMING = {"min_time_s": 0.01, "max_time_s": 0.5, "target_rse": 0.05}


def kb(*args: str, settings: dict | None = None, timeout: float = 900, check: bool = True):
    """`kernelbook [--settings JSON] ARGS...` in the repository, as a job would run it; with
    ``check`` an AssertionError naming the command, its exit status (a signal by name: a
    crash prints nothing) and its output, if it fails."""
    import json
    import signal

    cmd = [sys.executable, "-m", "kernelbook"]
    if settings is not None:
        cmd += ["--settings", json.dumps(settings)]
    proc = subprocess.run([*cmd, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        rc = proc.returncode
        status = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
        raise AssertionError(
            f"kernelbook {' '.join(args)} failed ({status}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def sanitizer_rows(tmp_path: Path, study: str, variant: str):
    """`kernelbook compile` then `kernelbook sanitize` of one variant, as the book's jobs run
    them; its sanitizer table, one row a tool."""

    build, out = tmp_path / "build", tmp_path / "sanitizer.parquet"
    own = {"studies": [study]}
    kb("compile", study, variant, "--cubin", str(build / variant / "kernel.cubin"), settings=own)
    kb("sanitize", study, variant, "--build-dir", str(build), "--out", str(out), settings=own)
    return tables.read(out).set_index("tool")


def bench_rows(tmp_path: Path, settings: dict, study: str, variant: str, sizes):
    """`kernelbook bench STUDY VARIANT --size ...` under ``settings``, in the repository;
    its measurements table (an AssertionError with the output if the command fails)."""

    out = tmp_path / f"{variant}-{len(list(tmp_path.iterdir()))}.parquet"
    kb(*_bench_args(study, [variant], sizes, out), settings=settings, timeout=600)
    return tables.read(out)


def _bench_args(study: str, variants, sizes, out: Path) -> list[str]:
    """`kernelbook bench STUDY VARIANT... --out OUT --size S...`'s arguments."""
    args = ["bench", study, *variants, "--out", str(out)]
    for s in sizes:
        args += ["--size", s]
    return args


@pytest.fixture(scope="session")
def bench_batch(tmp_path_factory):
    """``bench_batch(settings, study, variants, sizes, variant)``: ``variant``'s rows of one
    `kernelbook bench STUDY V1 V2 ... --record-failure` that checks and times all of
    ``variants`` in one process (run by the first test that asks, once a session): a
    parametrized test per variant costs one process start-up for the lot, and still fails
    alone, naming its variant's reason (or, where a crash ended the process early, saying
    which variant lost the device)."""
    import json

    runs: dict = {}
    where = tmp_path_factory.mktemp("bench-batch")

    def rows(settings: dict, study: str, variants, sizes, variant: str):
        variants, sizes = list(variants), list(sizes)
        assert variant in variants, f"{variant} is not in the batch"
        key = json.dumps([settings, study, variants, sizes], sort_keys=True)
        if key not in runs:
            out = where / f"{study}-{len(runs)}.parquet"
            args = [*_bench_args(study, variants, sizes, out), "--record-failure"]
            proc = kb(*args, settings=settings, timeout=60 + 30 * len(variants), check=False)
            runs[key] = (tables.read(out) if out.is_file() else None, proc)
        df, proc = runs[key]
        got = None if df is None else df[df["variant"] == variant].reset_index(drop=True)
        if got is None or got.empty:
            raise AssertionError(
                f"kernelbook bench {study} ({len(variants)} variants in one process, exit "
                f"{proc.returncode}) wrote no rows for {variant}:\n{proc.stdout[-3000:]}\n"
                f"{proc.stderr[-3000:]}"
            )
        return got

    return rows

"""The pipeline on a real SLURM, through profiles/slurm and snakemake-executor-plugin-slurm.

A session fixture starts a one-node cluster on this machine (tests/slurm_local.py: munged,
slurmctld, slurmd of Debian's slurm-wlm, installed with apt-get when missing). Through
`snakemake --profile profiles/slurm` the compile stage of a small study and the rendering
of its published worklog run as SLURM jobs; the scheduler's own records (jobcomp/filetxt,
`scontrol show job`) show that they did, and their outputs equal a local run's. A GPU job
asks the scheduler for a GPU, and this node, which has none, refuses it at submission.

Needs root (slurmd runs the jobs as their submitter; munged's key belongs to the user it
runs as) and, where the daemons are not installed yet, apt-get with network access.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import slurm_local
import yaml
from conftest import copy_env, copy_repo, planned_jobs, run_in, snakemake
from slurm_local import LocalSlurm, SlurmError, install, missing_tools
from test_worklog import GPU, STUDY, make_repo, publish_fixture

from kernelbook import gpu as kb_gpu
from kernelbook import locks as kb_locks
from kernelbook import tables
from kernelbook.build import nvcc as kb_build
from kernelbook.report import index as kb_index


def _why_not() -> str:
    if shutil.which("nvcc") is None:
        return "nvcc not on PATH (the compile stage needs it)"
    if os.geteuid() != 0:
        return "not root: slurmd and munged of the local test cluster need root"
    if missing_tools() and shutil.which("apt-get") is None:
        return f"{', '.join(missing_tools())} missing and no apt-get to install slurm-wlm"
    return ""


needs_slurm = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "-")

PARTITION = "kbtest"  # the test cluster's partition, given through the profile's knob
SLURM_ARGS = (
    "--profile",
    "profiles/slurm",
    # profiles/default (GPU jobs one at a time) is for one machine, not for a cluster
    "--workflow-profile",
    "none",
    # no slurmdbd here, so no sacct: the plugin asks squeue (MinJobAge is an hour)
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--slurm-keep-successful-logs",
    "--jobs",
    "4",
)
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (.+?)\)\.")


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A running one-node SLURM cluster (installed if missing); torn down afterwards.

    One per xdist worker, each in that worker's basetemp with its own ports and daemons
    (test_gpu_job_asks_for_a_gpu_and_is_refused_here counts the jobs its cluster records);
    the apt-get install, if any, runs in one worker while the others wait for it."""
    try:
        install()
    except SlurmError as e:
        pytest.fail(str(e))
    root = Path(tmp_path_factory.mktemp("slurm"))
    cluster = LocalSlurm(root, partition=PARTITION)
    try:
        cluster.start()
    except SlurmError as e:
        cluster.stop()
        pytest.fail(f"the local SLURM did not start: {e}")
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


def via_slurm(
    cluster: LocalSlurm, root: Path, *args: str, timeout: float = 900
) -> subprocess.CompletedProcess:
    """`snakemake --profile profiles/slurm ...` in ``root``, against the test cluster."""
    env = copy_env(root)
    env.update(SLURM_CONF=str(cluster.conf), KERNELBOOK_SLURM_PARTITION=PARTITION)
    for knob in ("KERNELBOOK_SLURM_ACCOUNT", "KERNELBOOK_SLURM_GPU_PARTITION"):
        env.pop(knob, None)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *SLURM_ARGS, *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def small_study(dest: Path) -> Path:
    """A copy with one study (sgemm, two variants) and its worklog published, as in
    test_worklog: `all` there compiles two kernels and renders the published page."""
    root = make_repo(dest)
    cfg = root / "config" / "config.yaml"
    data = yaml.safe_load(cfg.read_text())
    data["studies"] = [STUDY]
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    publish_fixture(root)
    return root


# The two tests of `runs` stay on one xdist worker, so that its two builds are made once.
ON_RUNS_WORKER = pytest.mark.xdist_group("slurm_runs")


@pytest.fixture(scope="module")
def runs(slurm, tmp_path_factory, nogpu_args):
    """The same small book built twice: through SLURM, and locally (--cores 2)."""
    base = tmp_path_factory.mktemp("slurm_runs")
    # both at the same path, one after the other: nvcc -lineinfo writes the source's
    # absolute path into the cubin, so only then can the two be compared byte for byte.
    # The session's cubin cache is keyed by content, not path: a cubin another worker
    # compiled in another copy would carry that copy's path, so these two builds share a
    # cache of their own (the SLURM jobs inherit it through sbatch's environment).
    book = base / "book"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(kb_build.CACHE_ENV, str(base / "cubins"))
        ref = snakemake(small_study(book), "--cores", "2", "all", *nogpu_args, timeout=900)
        local = book.rename(base / "local")
        remote = small_study(book)
        proc = via_slurm(slurm, remote, "all", *nogpu_args)
    return remote, proc, local, ref


def submitted(proc) -> dict[str, str]:
    """SLURM job id -> the slurm log path Snakemake printed for it."""
    return {m.group(2): m.group(3) for m in SUBMITTED.finditer(output(proc))}


# ------------------------------------------------------------------------------------------
# CPU jobs through sbatch


@needs_slurm
@ON_RUNS_WORKER
def test_jobs_went_through_sbatch(slurm, runs):
    remote, proc, _, _ = runs
    assert proc.returncode == 0, output(proc)[-6000:]
    jobs = submitted(proc)
    assert jobs, output(proc)[-3000:]
    # the scheduler's records of every submitted job: one jobcomp line each, completed on
    # this node, in the partition the profile's knob named, without a GPU
    recs = {r["JobId"]: r for r in slurm.jobcomp_records()}
    rules = []
    for jobid in jobs:
        rec = recs.get(jobid)
        assert rec, f"no jobcomp record of SLURM job {jobid}: {slurm.jobcomp.read_text()}"
        assert rec["JobState"] == "COMPLETED", rec
        assert rec["NodeList"] == slurm.name and rec["Partition"] == PARTITION, rec
        assert rec["WorkDir"] == str(remote), rec
        assert "gpu" not in rec["Tres"], rec
        shown = slurm.show_job(jobid)
        assert shown["JobState"] == "COMPLETED", shown
        assert "gpu" not in shown.get("TresPerJob", "") + shown["TRES"], shown
        m = re.match(r"rule_(\w+?)(?:_wildcards_.*)?$", shown["Comment"])
        assert m, shown["Comment"]
        rules.append(m.group(1))
    # the compile stage of the study, its gate and the rendering of its published page,
    # each a job
    assert sorted(rules) == sorted(
        [
            "compile",
            "compile",
            "build_table",
            "sass_table",
            "loop_table",
            "build_gate",
            "study_figures",
            "worklog",
        ]
    ), rules
    compiles = [j for j in jobs if "rule_compile" in jobs[j]]
    assert sorted(Path(jobs[j]).parent.name for j in compiles) == [
        f"{STUDY}_01_naive",
        f"{STUDY}_02_coalescing",
    ]


# Logs and Snakemake's per-job timings (benchmark: files) differ from run to run.
NOT_COMPARED = ("logs", "benchmarks")


def _files(root: Path, kind: str | None = None) -> list[str]:
    """Result files (relative to results/), or only those under results/<kind>/."""
    res = root / "results"
    if kind:
        return sorted(str(p.relative_to(res)) for p in (res / kind).rglob("*") if p.is_file())
    return sorted(
        str(p.relative_to(res))
        for p in res.rglob("*")
        if p.is_file() and p.relative_to(res).parts[0] not in NOT_COMPARED
    )


# The one column that differs between two runs of the same build: when it ran.
VOLATILE = {"built_at"}


@needs_slurm
@ON_RUNS_WORKER
def test_outputs_equal_a_local_run(runs):
    remote, proc, local, ref = runs
    assert proc.returncode == 0, output(proc)[-6000:]
    assert ref.returncode == 0, output(ref)[-6000:]
    files = _files(remote)
    assert files == _files(local)
    assert _files(remote, "benchmarks") == _files(local, "benchmarks")  # the same jobs ran
    assert f"build/{STUDY}/build.parquet" in files and f"{GPU}/{STUDY}/worklog.md" in files
    differ = []
    for rel in files:
        a, b = remote / "results" / rel, local / "results" / rel
        if rel.endswith(".parquet"):
            ta, tb = tables.read(a), tables.read(b)
            keep = [c for c in ta.columns if c not in VOLATILE]
            pd.testing.assert_frame_equal(ta[keep], tb[keep], obj=rel)
        elif a.read_bytes() != b.read_bytes():
            differ.append(rel)
    assert not differ, differ
    build = tables.read(remote / "results" / "build" / STUDY / "build.parquet")
    assert sorted(build["variant"]) == ["01_naive", "02_coalescing"]


# ------------------------------------------------------------------------------------------
# GPU jobs ask for a GPU; a node without one refuses them


@needs_slurm
@pytest.mark.parametrize(
    ("model", "target", "asked"),
    [
        ("h100", "results/h100/device.parquet", "gres:gpu:h100:1"),
        (None, f"results/{GPU}/device.parquet", "gres:gpu:1"),
    ],
)
def test_gpu_job_asks_for_a_gpu_and_is_refused_here(slurm, tmp_path, model, target, asked):
    root = copy_repo(tmp_path / "repo")
    shutil.copytree(Path(__file__).parents[1] / "analysis", root / "analysis")
    before = {r["JobId"] for r in slurm.jobcomp_records()}
    args = ["--config", f"gpu_model={model}"] if model else []
    proc = via_slurm(slurm, root, *args, "--", target, timeout=300)
    out = output(proc)
    assert proc.returncode != 0, out[-3000:]
    # the refusal, as the executor reports it: sbatch's error, with the request it refused
    assert "SLURM sbatch failed" in out, out[-3000:]
    assert "Requested node configuration is not available" in out, out[-3000:]
    flag = f"--gpus={model}:1" if model else "--gpus=1"
    assert flag in out, out[-3000:]
    assert "rule_device" in out, out[-3000:]
    # ... and kernelbook's one-line reading of it
    said = [ln for ln in out.splitlines() if ln.startswith("kernelbook: the scheduler refused")]
    assert len(said) == 1, out[-3000:]
    assert "device" in said[0] and flag in said[0], said
    # the scheduler recorded the request, and never ran it
    new = [r for r in slurm.jobcomp_records() if r["JobId"] not in before]
    assert len(new) == 1, new
    rec = new[0]
    assert rec["JobState"] == "FAILED" and rec["NodeCnt"] == "0", rec
    shown = slurm.show_job(rec["JobId"])
    assert shown["TresPerJob"] == asked, shown
    assert shown["Reason"] == "BadConstraints" and shown["Comment"].startswith("rule_device")
    assert not shown.get("NodeList"), shown
    assert not (root / target).exists()
    log = root / "results" / "logs" / "device" / f"{target.split('/')[1]}.log"
    assert not log.exists() or not log.read_text(), log.read_text()  # never started


# ------------------------------------------------------------------------------------------
# What the profile asks for, rule by rule (a dry run: nothing is submitted)

GPU_RULES = {"bench", "bench_candidates", "bench_tuned_sweep", "profile", "sanitize", "device"}


@needs_slurm
def test_profile_requests_a_gpu_for_gpu_rules_only(slurm, repo_copy):
    shutil.copytree(Path(__file__).parents[1] / "analysis", repo_copy / "analysis")
    env = {
        "SLURM_CONF": str(slurm.conf),
        "KERNELBOOK_SLURM_PARTITION": "cpus",
        "KERNELBOOK_SLURM_GPU_PARTITION": "gpus",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            *SLURM_ARGS,
            "-n",
            "--config",
            "gpu_model=h100",
            "studies=[transpose]",
        ],
        cwd=repo_copy,
        env={**copy_env(repo_copy), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, output(proc)[-3000:]
    jobs = []
    rule = None
    for line in output(proc).splitlines():
        m = re.match(r"^(?:local)?rule (\w+):", line)
        if m:
            rule = m.group(1)
        m = re.match(r"^\s+resources: (.*)$", line)
        if m and rule:
            jobs.append((rule, dict(kv.split("=", 1) for kv in m.group(1).split(", "))))
            rule = None
    seen = {r for r, _ in jobs}
    assert seen >= GPU_RULES | {"compile", "measurements", "worklog"}, seen
    for r, res in jobs:
        if r in GPU_RULES:
            assert res["gpu"] == "1" and res["gpu_model"] == "h100", (r, res)
            assert res["slurm_partition"] == "gpus", (r, res)
            assert int(res["mem_mb"]) >= 16000 and int(res["runtime"]) >= 20, (r, res)
        else:
            assert "gpu" not in res and "gpu_model" not in res, (r, res)
            assert res["slurm_partition"] == "cpus", (r, res)
    # results go where the model says, also from this host without a GPU
    assert "results/h100/transpose/measurements.parquet" in output(proc)


# ------------------------------------------------------------------------------------------
# The install, once per machine (no root needed: apt-get is stood in for)

INSTALLER = textwrap.dedent(
    """\
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    import slurm_local as sl
    d = Path(sys.argv[1])
    sl.INSTALL_LOCK = d / "install.lock"
    sl.missing_tools = lambda: [] if (d / "installed").exists() else ["slurmd"]
    sl.shutil.which = lambda name: "/usr/bin/" + name
    def apt_get(*args, **kw):
        with open(d / "apt.log", "a") as f:
            f.write(" ".join(args) + "\\n")
        time.sleep(1)  # long enough for the other processes to be waiting
        if args[0] == "install":
            (d / "installed").touch()
    sl.apt_get = apt_get
    sl.install(timeout=60)
    """
)


def test_install_runs_apt_get_once_for_concurrent_workers(tmp_path):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", INSTALLER, str(tmp_path), str(Path(__file__).parent)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    log = (tmp_path / "apt.log").read_text().splitlines()
    assert log == [
        "update -qq",
        f"install -y -qq --no-install-recommends {' '.join(slurm_local.PACKAGES)}",
    ]


def test_apt_get_waits_for_apt_locks(monkeypatch):
    calls = []
    locked = "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 7 (apt-get)\n"

    def run(cmd, **kw):
        calls.append(cmd)
        rc, err = (100, locked) if len(calls) < 3 else (0, "")
        return subprocess.CompletedProcess(cmd, rc, "", err)

    monkeypatch.setattr(slurm_local.subprocess, "run", run)
    monkeypatch.setattr(slurm_local.time, "sleep", lambda s: None)
    slurm_local.apt_get("update", "-qq")
    assert len(calls) == 3  # refused twice for the lists lock, which update does not wait for
    assert calls[0][:5] == ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-o", "Acquire::Retries=3"]
    # any other failure is reported at once, with apt-get's words
    calls.clear()
    monkeypatch.setattr(
        slurm_local.subprocess,
        "run",
        lambda cmd, **kw: calls.append(cmd) or subprocess.CompletedProcess(cmd, 100, "", "E: boom"),
    )
    with pytest.raises(SlurmError, match=r"apt-get .* install munge failed \(100\):\nE: boom"):
        slurm_local.apt_get("install", "munge")
    assert len(calls) == 1


# ------------------------------------------------------------------------------------------
# Two GPU models, one after the other, into one book


def test_two_models_into_one_book(tmp_path):
    root = small_study(tmp_path / "repo")
    h200 = root / "worklogs" / GPU / STUDY
    # as if `--config gpu_model=h100 all publish` had run on the cluster's H100s
    shutil.copytree(h200, root / "worklogs" / "h100" / STUDY)
    index = kb_index.index(root / "worklogs")
    header = next(ln for ln in index.splitlines() if ln.startswith("| study"))
    assert [c.strip() for c in header.strip("|").split("|")] == ["study", "h100", GPU]
    # with gpu_model=a100 the next run measures a100 and renders only its own pages ...
    proc = snakemake(root, "-n", "-p", "--config", "gpu_model=a100", "--", "all", "publish")
    assert proc.returncode == 0, output(proc)[-3000:]
    jobs = planned_jobs(output(proc))
    pages = sorted(w["gpu"] for r, w in jobs if r == "worklog")
    assert pages == ["a100"], pages
    assert {w["gpu"] for r, w in jobs if r in GPU_RULES} == {"a100"}
    # ... and publish adds a100/sgemm beside the others
    assert f"publish --results results a100/{STUDY} " in output(proc)
    # without a GPU or a gpu_model, `all` renders every published model's page
    proc = snakemake(root, "-n", "--config", "gpu=none", "--", "all")
    assert proc.returncode == 0, output(proc)[-3000:]
    pages = sorted(w["gpu"] for r, w in planned_jobs(output(proc)) if r == "worklog")
    assert pages == sorted(["h100", GPU]), pages


# ------------------------------------------------------------------------------------------
# The GPU lock stays on this node


def test_checking_jobs_share_a_gpu_and_timing_jobs_have_it_alone(tmp_path):
    """compute-sanitizer jobs take the GPU's lock shared (many at once); a job that times or
    profiles takes it exclusive: never beside a checker, never beside another timer. Real
    flock on real files (each open is its own holder, as each job's process is)."""
    uuids = ["GPU-a", "GPU-b"]
    s1 = kb_gpu.take_lock(tmp_path, uuids, shared=True)
    s2 = kb_gpu.take_lock(tmp_path, uuids, shared=True)
    assert s1[0] == s2[0] == 0  # two checkers on the first GPU
    x = kb_gpu.take_lock(tmp_path, uuids)
    assert x[0] == 1  # a timer goes to the GPU no checker holds
    assert kb_gpu.take_lock(tmp_path, uuids) is None  # and a second timer waits
    assert kb_gpu.take_lock(tmp_path, uuids[1:], shared=True) is None  # no checker beside it
    s1[1].close()
    assert kb_gpu.take_lock(tmp_path, uuids[:1]) is None  # one checker still holds GPU-a
    s2[1].close()
    x0 = kb_gpu.take_lock(tmp_path, uuids[:1])
    assert x0 is not None and x0[0] == 0  # the last checker gone: the timer may have it
    holder = (tmp_path / kb_gpu.lock_name("GPU-a")).read_text()
    assert holder.startswith(f"{os.getpid()} ")  # an exclusive holder says who it is
    x0[1].close()
    x[1].close()


def test_gpu_lock_is_node_local(monkeypatch, tmp_path):
    local = tmp_path / "locks"
    monkeypatch.setenv(kb_gpu.LOCK_DIR_ENV, str(local))
    assert kb_gpu.lock_dir() == local
    kind = kb_gpu.filesystem_type(local)
    assert kind and kind not in kb_gpu.SHARED_FS
    name = kb_gpu.lock_name("GPU-1234")
    assert name.endswith("-GPU-1234.lock") and name.startswith(kb_locks.socket.gethostname()[:8])
    # the same folder, were its filesystem one that hosts share: refused, with the way out
    monkeypatch.setattr(kb_locks, "SHARED_FS", kb_locks.SHARED_FS | {kind})
    with pytest.raises(kb_gpu.NoGpu, match=f"KERNELBOOK_LOCK_DIR={local}: on a filesystem"):
        kb_gpu.lock_dir()
    # the defaults fall back to $XDG_RUNTIME_DIR when /tmp is shared ...
    monkeypatch.delenv(kb_gpu.LOCK_DIR_ENV)
    shm = Path("/dev/shm")
    other = kb_gpu.filesystem_type(shm)
    if other and other != kind:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(shm))
        if kb_gpu.filesystem_type("/tmp") == kind:
            assert kb_gpu.lock_dir() == shm / "kernelbook-gpu-locks"
    # ... and give up, saying so, when that is shared too (or unset)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    if kb_gpu.filesystem_type("/tmp") == kind:
        with pytest.raises(kb_gpu.NoGpu, match="GPU locks must be node-local"):
            kb_gpu.lock_dir()


@pytest.mark.parametrize(
    ("model", "gpu_slug", "ok"),
    [
        ("h100", "nvidia-h100-80gb-hbm3", True),
        ("H100", "nvidia-h100-nvl", True),
        ("nvidia-h200", "nvidia-h200", True),
        ("a100_80gb", "nvidia-a100-sxm4-80gb", True),
        ("h100", "nvidia-h200", False),
        ("a100_80gb", "nvidia-a100-sxm4-40gb", False),
        ("h10", "nvidia-h100-80gb-hbm3", False),
    ],
)
def test_gpu_model_matches_the_gpu_a_job_got(model, gpu_slug, ok):
    assert kb_gpu.model_matches(model, gpu_slug) is ok


def test_gpu_model_is_validated(repo_copy):
    proc = snakemake(repo_copy, "-n", "--config", "gpu_model=h100:2")
    assert proc.returncode != 0
    assert "gpu_model" in output(proc), output(proc)[-2000:]
    proc = run_in(repo_copy, ["-m", "snakemake", "-n", "--config", "gpu_model=h100", "gpu=none"])
    assert proc.returncode != 0
    assert "gpu: none and gpu_model: h100 contradict" in output(proc), output(proc)[-2000:]

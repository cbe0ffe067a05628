"""Several GPUs on one host, on a machine without any: NVML is replaced by a module that
answers for the GPUs $FAKE_NVML_GPUS names, and everything above it is the project's own
code in real processes (kernelbook.gpu's detect and slots, real flock on real files, the
`kernelbook gpus` verb that tools/gpu-session.sh sizes a run by). One GPU or several go down
the same path: N is what NVML lists, narrowed by CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import copy_repo

REPO = Path(__file__).resolve().parents[1]

# pynvml's calls that kernelbook.gpu.detect makes, answering for "model:uuid,model:uuid,..."
FAKE_PYNVML = """
import os

class NVMLError(Exception):
    pass

def _gpus():
    spec = os.environ.get("FAKE_NVML_GPUS", "")
    if spec == "unloaded":
        raise NVMLError("Driver Not Loaded")
    return [tuple(g.split(":")) for g in spec.split(",") if g]

def nvmlInit():
    _gpus()

def nvmlShutdown():
    pass

def nvmlDeviceGetCount():
    return len(_gpus())

def nvmlDeviceGetHandleByIndex(i):
    return _gpus()[i]

def nvmlDeviceGetUUID(h):
    return h[1]

def nvmlDeviceGetName(h):
    return h[0].encode()

def nvmlSystemGetDriverVersion():
    return b"580.00"
"""

H200S = "NVIDIA H200:GPU-aaaa,NVIDIA H200:GPU-bbbb,NVIDIA H200:GPU-cccc"

# a job's start: take a slot, say which, hold it until told to go (a line on stdin)
HOLD = """
import os, sys
from kernelbook import gpu
try:
    slot = gpu.acquire_slot(wait_s=float(sys.argv[1]), preload=(), shared=sys.argv[2] == "shared")
except gpu.NoGpu as e:
    print("NoGpu:", e, flush=True)
    sys.exit(3)
print(slot.uuid, slot.index, os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def fake_env(tmp_path):
    fake = tmp_path / "fake_nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELBOOK_")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(
        PYTHONPATH=os.pathsep.join([str(fake), str(REPO / "src")]),
        FAKE_NVML_GPUS=H200S,
        KERNELBOOK_LOCK_DIR=str(tmp_path / "locks"),
        KERNELBOOK_JOBSERVER="0",
    )
    return env


def gpus(env, **extra):
    return subprocess.run(
        [sys.executable, "-m", "kernelbook", "gpus"],
        env={**env, **extra}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_gpus_verb_lists_what_jobs_may_take(fake_env):
    proc = gpus(fake_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
    # CUDA_VISIBLE_DEVICES narrows it as it narrows the jobs: indices, in its order, or UUIDs
    assert gpus(fake_env, CUDA_VISIBLE_DEVICES="2,0").stdout.split() == ["GPU-cccc", "GPU-aaaa"]
    assert gpus(fake_env, CUDA_VISIBLE_DEVICES="GPU-bb").stdout.split() == ["GPU-bbbb"]
    # one GPU: the same path, a list of one
    one = gpus(fake_env, FAKE_NVML_GPUS="NVIDIA H200:GPU-only")
    assert one.returncode == 0 and one.stdout.split() == ["GPU-only"]
    # none: one line that says why, and a failing status a script stops on
    for spec, why in [
        ("unloaded", "NVML unavailable (NVMLError: Driver Not Loaded)"),
        ("", "NVML found no CUDA device"),
    ]:
        proc = gpus(fake_env, FAKE_NVML_GPUS=spec)
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.strip() == f"kernelbook gpus: no GPU to run on: {why}", proc.stderr
    proc = gpus(fake_env, CUDA_VISIBLE_DEVICES="7")
    assert proc.returncode == 1 and "among CUDA_VISIBLE_DEVICES=7" in proc.stderr
    mixed = "NVIDIA H200:GPU-aaaa,NVIDIA A100-SXM4-80GB:GPU-dddd"
    proc = gpus(fake_env, FAKE_NVML_GPUS=mixed)
    assert proc.returncode == 1 and "GPUs of different models" in proc.stderr, proc.stderr
    assert gpus(fake_env, FAKE_NVML_GPUS=mixed, CUDA_VISIBLE_DEVICES="1").stdout.split() == [
        "GPU-dddd"
    ]


class Job:
    """A process that takes a GPU slot and holds it until let go."""

    def __init__(self, env, wait_s=30.0, mode="exclusive", **extra):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(wait_s), mode],
            env={**env, **extra}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.said = self.proc.stdout.readline().split()

    def go(self) -> int:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        rc = self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc


def test_concurrent_jobs_on_fake_gpus_take_distinct_ones_and_wait_for_a_free_one(fake_env):
    jobs = [Job(fake_env) for _ in range(3)]
    try:
        got = [j.said for j in jobs]
        # each its own GPU, made its only device
        assert sorted(uuid for uuid, _, _ in got) == ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"], got
        assert all(visible == uuid for uuid, _, visible in got), got
        assert sorted(int(i) for _, i, _ in got) == [0, 1, 2]
        # a fourth finds every GPU held, and says so once its wait is up
        late = Job(fake_env, wait_s=0.5)
        assert late.said[0] == "NoGpu:" and "every visible GPU stayed locked" in " ".join(late.said)
        assert late.proc.wait(timeout=60) == 3
        late.proc.stdin.close()
        late.proc.stdout.close()
        late.proc.stderr.close()
        # one job ends: a job that waits gets exactly the GPU it let go
        freed = got[1][0]
        waiting = subprocess.Popen(
            [sys.executable, "-c", HOLD, "30", "exclusive"],
            env=fake_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(0.5)  # it is waiting on the locks
        assert jobs[1].go() == 0
        said = waiting.stdout.readline().split()
        assert said[0] == freed and said[2] == freed, said
        waiting.stdin.write("\n")
        waiting.stdin.close()
        assert waiting.wait(timeout=60) == 0
        waiting.stdout.close()
    finally:
        for j in jobs:
            if j.proc.poll() is None:
                j.go()


def test_checkers_spread_over_fake_gpus_and_a_narrowed_host_stays_narrowed(fake_env):
    # checkers (shared) go to the least loaded GPU: the first two to distinct ones; a timer
    # takes the GPU no one holds; a timer limited to a GPU a checker holds waits for it
    # rather than going elsewhere; a checker limited to it joins the checker there
    c1 = Job(fake_env, mode="shared")
    c2 = Job(fake_env, mode="shared")
    t = Job(fake_env)
    try:
        assert (c1.said[0], c2.said[0]) == ("GPU-aaaa", "GPU-bbbb"), (c1.said, c2.said)
        assert t.said[0] == "GPU-cccc", t.said
        held = Job(fake_env, wait_s=0.5, CUDA_VISIBLE_DEVICES="0")
        assert held.said[0] == "NoGpu:", held.said
        assert held.proc.wait(timeout=60) == 3
        for stream in (held.proc.stdin, held.proc.stdout, held.proc.stderr):
            stream.close()
        beside = Job(fake_env, mode="shared", CUDA_VISIBLE_DEVICES="0")
        assert beside.said[0] == "GPU-aaaa", beside.said
        assert beside.go() == 0
        # a third checker: the GPUs hold one job each, the first of them comes first
        c3 = Job(fake_env, mode="shared")
        assert c3.said[0] == "GPU-aaaa", c3.said
        assert c3.go() == 0
        # narrowed to GPU 2 by index: that GPU, whatever the others do
        t.go()
        own = Job(fake_env, CUDA_VISIBLE_DEVICES="2")
        assert own.said[0] == own.said[2] == "GPU-cccc", own.said
        assert own.go() == 0
    finally:
        for j in (c1, c2, t):
            if j.proc.poll() is None:
                j.go()


# a bench job: takes its GPU shared (its checks), then switches as told by lines on stdin
# ("exclusive": its timing, "shared": its next variant's checks), saying each switch; an
# empty line ends it
SWITCH = """
import sys
from kernelbook import gpu
slot = gpu.acquire_slot(wait_s=30, preload=(), shared=True)
print(slot.uuid, flush=True)
for line in sys.stdin:
    if not line.strip():
        break
    gpu.switch_mode(slot, shared=line.strip() == "shared")
    print("switched", line.strip(), flush=True)
"""


class Bencher:
    """A process that checks (shared) and times (exclusive) as it is told."""

    def __init__(self, env):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SWITCH], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.uuid = self.proc.stdout.readline().strip()

    def tell(self, what: str) -> None:
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()

    def switched(self, timeout: float) -> bool:
        """Whether it said it switched within ``timeout`` seconds."""
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return bool(ready) and self.proc.stdout.readline().startswith("switched")

    def end(self) -> int:
        if self.proc.poll() is None:
            self.tell("")
        rc = self.proc.wait(timeout=60)
        self.proc.stdin.close()
        self.proc.stdout.close()
        return rc


def test_a_bench_times_alone_and_new_checkers_wait_for_it(fake_env, tmp_path):
    """A bench checks beside other checkers, then waits for the GPU alone for its timing;
    while it waits no new checker starts (it would never get the GPU, checkers coming and
    going), and none starts while it times. Back to checking, it shares again. The ledger
    has a line for each span of its hold, in its mode."""
    ledger = tmp_path / "ledger.tsv"
    env = {
        **fake_env,
        "FAKE_NVML_GPUS": "NVIDIA H200:GPU-only",
        "KERNELBOOK_GPU_LEDGER": str(ledger),
    }
    checker = Job(env, mode="shared")
    bench = Bencher(env)
    try:
        assert checker.said[0] == bench.uuid == "GPU-only"
        bench.tell("exclusive")
        assert not bench.switched(0.5)  # the checker still checks
        late = Job(env, wait_s=0.5, mode="shared")
        assert late.said[0] == "NoGpu:", late.said  # the waiting timer goes first
        late.proc.wait(timeout=60)
        for stream in (late.proc.stdin, late.proc.stdout, late.proc.stderr):
            stream.close()
        assert checker.go() == 0
        assert bench.switched(10)  # the GPU is its own
        during = Job(env, wait_s=0.5, mode="shared")
        assert during.said[0] == "NoGpu:", during.said
        during.proc.wait(timeout=60)
        for stream in (during.proc.stdin, during.proc.stdout, during.proc.stderr):
            stream.close()
        bench.tell("shared")
        assert bench.switched(10)
        beside = Job(env, wait_s=5, mode="shared")
        assert beside.said[0] == "GPU-only", beside.said  # checking again: shared
        assert beside.go() == 0
    finally:
        if checker.proc.poll() is None:
            checker.go()
        assert bench.end() == 0
    from kernelbook import ledger as kb_ledger

    mine = [h for h in kb_ledger.read(ledger) if h.pid == bench.proc.pid]
    assert [h.mode for h in mine] == ["shared", "exclusive", "shared"], mine
    assert all(a.end <= b.start + 1e-3 for a, b in zip(mine, mine[1:], strict=False)), mine


def test_two_benches_that_both_want_the_gpu_alone_take_turns(fake_env):
    """Both check side by side, both then ask for the GPU alone: each lets its shared hold
    go before it waits, so neither waits on the other's check (no deadlock): one times,
    then the other."""
    env = {**fake_env, "FAKE_NVML_GPUS": "NVIDIA H200:GPU-only"}
    a, b = Bencher(env), Bencher(env)
    try:
        a.tell("exclusive")
        b.tell("exclusive")
        import select

        ready, _, _ = select.select([a.proc.stdout, b.proc.stdout], [], [], 10)
        assert len(ready) == 1, ready  # one of them times, alone
        first, second = (a, b) if ready[0] is a.proc.stdout else (b, a)
        assert first.switched(1)
        assert not second.switched(0.5)
        assert first.end() == 0  # its timing done
        assert second.switched(10)
    finally:
        a.end()
        b.end()


def test_a_job_given_a_fake_gpu_of_another_model_measures_nothing(fake_env):
    job = Job(fake_env, KERNELBOOK_GPU_MODEL="a100")
    assert job.said[0] == "NoGpu:", job.said
    text = " ".join(job.said)
    assert "writes results for GPU model 'a100' but got NVIDIA H200 (nvidia-h200)" in text
    assert job.proc.wait(timeout=60) == 3
    for stream in (job.proc.stdin, job.proc.stdout, job.proc.stderr):
        stream.close()
    assert not list(Path(fake_env["KERNELBOOK_LOCK_DIR"]).glob("*.lock"))  # no lock taken


def test_a_session_without_a_gpu_starts_nothing(tmp_path, fake_env):
    """tools/gpu-session.sh sizes its run by `kernelbook gpus`: with no GPU it stops at once
    with NVML's reason, before Snakemake or any test starts."""
    root = tmp_path / "checkout"  # the tools and the library, no wheel folder
    for part in ("tools", "src"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**fake_env, "FAKE_NVML_GPUS": "", "KERNELBOOK_GIT_COMMIT": "c0ffee"}
    proc = subprocess.run(
        ["bash", str(root / "tools" / "gpu-session.sh")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "kernelbook gpus: no GPU to run on: NVML found no CUDA device"
    assert proc.stdout == "" and not (root / "results").exists()


def test_a_run_here_takes_as_many_gpu_jobs_at_once_as_nvml_lists_gpus(tmp_path, fake_env):
    """Snakemake's gpu resource, where --resources does not set it, is the number of GPUs NVML
    lists (CUDA_VISIBLE_DEVICES narrowing it), 1 without any: a real run of the real Snakefile
    (one compile job, forced), whose scheduler says what it was given."""
    root = copy_repo(tmp_path / "repo")
    target = "results/build/sgemm/02_coalescing/kernel.cubin"
    fake = fake_env["PYTHONPATH"].split(os.pathsep)[0]

    def given(*extra: str, **env: str) -> int:
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", target, "--force", "--cores", "1", *extra],
            cwd=root, capture_output=True, text=True, timeout=600,
            env={**fake_env, "PYTHONPATH": os.pathsep.join([fake, str(root / "src")]), **env},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        found = re.search(r"Provided resources: .*\bgpu=\D*(\d+)", proc.stderr)
        assert found, proc.stderr[-3000:]
        return int(found[1])

    assert given() == 3
    assert given(CUDA_VISIBLE_DEVICES="2,0") == 2
    assert given(FAKE_NVML_GPUS="NVIDIA H200:GPU-only") == 1
    assert given(FAKE_NVML_GPUS="") == 1  # no GPU: compile only, the count moot
    assert given("--resources", "gpu=5") == 5  # what the command line says wins


def test_benches_spread_over_two_fake_gpus_and_a_timer_holds_back_only_its_own(fake_env, tmp_path):
    """Four benches on two GPUs: two on each (seats), whichever order they come in. One
    waiting to time on its GPU keeps new checkers off that GPU only: a checker goes to
    the other one. Their ledger has holds of both GPUs and no hold that overlaps a timing
    (`kernelbook ledger --check`'s conflicts)."""
    from kernelbook import ledger

    book = tmp_path / "gpu-ledger.tsv"
    env = {**fake_env, "FAKE_NVML_GPUS": "NVIDIA H200:GPU-aaaa,NVIDIA H200:GPU-bbbb"}
    env["KERNELBOOK_GPU_LEDGER"] = str(book)
    benches = [Bencher(env) for _ in range(4)]
    try:
        on = sorted(b.uuid for b in benches)
        assert on == ["GPU-aaaa", "GPU-aaaa", "GPU-bbbb", "GPU-bbbb"], on
        first = benches[0]
        first.tell("exclusive")
        assert not first.switched(0.5)  # its GPU's other bench still checks
        checker = Job(env, wait_s=5, mode="shared")
        other = "GPU-bbbb" if first.uuid == "GPU-aaaa" else "GPU-aaaa"
        assert checker.said[0] == other, checker.said  # not behind the waiting timer
        assert checker.go() == 0
        mate = next(b for b in benches[1:] if b.uuid == first.uuid)
        assert mate.end() == 0
        assert first.switched(10)
        first.tell("shared")
        assert first.switched(10)
    finally:
        for b in benches:
            b.end()
    holds = ledger.read(book)
    assert {h.gpu for h in holds} == {"GPU-aaaa", "GPU-bbbb"}, holds
    timing = [h for h in holds if h.mode == "exclusive"]
    assert [h.gpu for h in timing] == [first.uuid], holds
    # the mate's checks on that GPU ended before the timing began
    assert ledger.conflicts(holds) == []
    mates = [h for h in holds if h.gpu == first.uuid and h.mode == "shared"]
    assert any(h.end <= timing[0].start for h in mates), holds

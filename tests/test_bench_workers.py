"""A bench of several variants (a tuned variant's candidates: the pipeline's
bench_candidates jobs) runs them in forked worker processes, each with its own CUDA context:
a worker whose device is lost (a crash, a hang) leaves, and so does one that dies outright,
and a fresh worker runs the rest. Here the processes, pipes and wait statuses are real; the
GPU work of each variant is a stand-in (kernelbook.measure.job._plain_rows), so that the
order of events can be forced. The GPU tier runs the same with real kernels
(test_gpu.py: a crash among controls)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, kb

from kernelbook import config as cfg
from kernelbook.build.job import BuildInfo
from kernelbook.measure import job


@dataclass
class V:
    id: str


@dataclass
class Study:
    name: str = "demo"


SLOT = type("Slot", (), {"uuid": "GPU-x"})()


def stand_in(behaviour: dict[str, str], log: Path):
    """_plain_rows for the test: each variant does what ``behaviour`` says (ok, crash,
    hang, die); every call is logged with the pid of the process that made it."""

    def rows(project, study, variant, info, sizes, slot, samples, record_failure):
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {variant.id} {info.failed_kind if info.failed else ''}\n")
        if info.failed:
            return [{"variant": variant.id, "status": "failed", "failure": info.failed_kind,
                     "reason": info.failed}]  # fmt: skip
        what = behaviour.get(variant.id, "ok")
        if what == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if what.startswith("raise"):  # an error of the bench's own code, not a kernel's
            raise RuntimeError(f"the timer broke{what[5:]}")
        samples.append({"variant": variant.id, "ms": 1.0})
        if what in ("crash", "hang"):
            return [{"variant": variant.id, "status": "failed", "failure": what, "reason": what}]
        return [{"variant": variant.id, "status": "ok", "failure": None, "reason": None}]

    return rows


def run(monkeypatch, tmp_path, behaviour, names):
    log = tmp_path / "calls.txt"
    monkeypatch.setattr(job, "_plain_rows", stand_in(behaviour, log))
    items = [(V(n), BuildInfo(Path(f"{n}.cubin"), "13.0", "-O3")) for n in names]
    rows, samples = job._run_in_workers(None, Study(), items, None, SLOT, True)
    calls = [line.split() for line in log.read_text().splitlines()]
    return rows, samples, calls


def test_one_worker_runs_every_variant_when_nothing_fails(monkeypatch, tmp_path):
    rows, samples, calls = run(monkeypatch, tmp_path, {}, ["a", "b", "c"])
    assert [r["variant"] for r in rows] == ["a", "b", "c"]
    assert [s["variant"] for s in samples] == ["a", "b", "c"]
    pids = {c[0] for c in calls}
    assert len(pids) == 1 and str(os.getpid()) not in pids  # one worker, not this process


@pytest.mark.parametrize("lost", ["crash", "hang"])
def test_a_lost_device_hands_the_rest_to_a_fresh_worker(monkeypatch, tmp_path, capfd, lost):
    rows, samples, calls = run(monkeypatch, tmp_path, {"b": lost}, ["a", "b", "c", "d"])
    assert [(r["variant"], r["status"]) for r in rows] == [
        ("a", "ok"), ("b", "failed"), ("c", "ok"), ("d", "ok"),
    ]  # fmt: skip
    assert rows[1]["failure"] == lost
    pid = {c[1]: c[0] for c in calls}
    assert pid["a"] == pid["b"] != pid["c"] == pid["d"]  # b's worker left; c and d: a new one
    assert f"demo/b lost the device ({lost}): a fresh process runs c, d" in capfd.readouterr().err


def test_a_worker_that_dies_costs_its_variant_one_failed_row(monkeypatch, tmp_path, capfd):
    """Killed by a signal while running b: b is recorded as a crash naming the signal (its
    failed rows made by a fresh worker, with the run's provenance), a and c are measured."""
    rows, _, calls = run(monkeypatch, tmp_path, {"b": "die"}, ["a", "b", "c"])
    assert [(r["variant"], r["status"]) for r in rows] == [
        ("a", "ok"), ("b", "failed"), ("c", "ok"),
    ]  # fmt: skip
    assert rows[1]["failure"] == "crash"
    assert rows[1]["reason"] == "the bench's worker process was killed by signal 9"
    assert [c[1:] for c in calls] == [["a"], ["b"], ["b", "crash"], ["c"]]
    assert "demo/b: the bench's worker process was killed by signal 9" in capfd.readouterr().err


def test_an_error_of_the_bench_itself_is_named_in_its_variants_failed_row(
    monkeypatch, tmp_path, capfd
):
    """A worker that raises an error that is not a kernel's (the timer's, say): its variant's
    failed row names that error, not only an exit status, and the next variant runs."""
    rows, _, calls = run(monkeypatch, tmp_path, {"b": "raise"}, ["a", "b", "c"])
    assert [(r["variant"], r["status"]) for r in rows] == [
        ("a", "ok"), ("b", "failed"), ("c", "ok"),
    ]  # fmt: skip
    assert rows[1]["reason"] == (
        "the bench's worker process exited with status 1, raising RuntimeError: the timer broke"
    )
    assert "Traceback" in capfd.readouterr().err  # the worker's traceback, in the job's log


def test_the_same_error_of_the_bench_on_two_variants_in_a_row_ends_the_bench(monkeypatch, tmp_path):
    """The same error raised running two variants one after another is the bench's, not
    the kernels': one error naming it, not a failed row for every variant of a tune space;
    different errors are each the variant's own."""
    said = r"demo/c: the bench's worker raised RuntimeError: the timer broke on this variant"
    with pytest.raises(job.TimingError, match=said):
        run(monkeypatch, tmp_path, {"b": "raise", "c": "raise", "d": "raise"}, list("abcd"))
    rows, _, _ = run(monkeypatch, tmp_path, {"b": "raise 1", "c": "raise 2"}, list("abcd"))
    assert [r["status"] for r in rows] == ["ok", "failed", "failed", "ok"]
    rows, _, _ = run(monkeypatch, tmp_path, {"b": "raise", "d": "raise"}, list("abcd"))
    assert [r["status"] for r in rows] == ["ok", "failed", "ok", "failed"]


def test_workers_that_cannot_run_anything_end_the_bench_in_one_error(monkeypatch, tmp_path):
    """A worker that dies even on a variant it only has to record as failed (the GPU is gone
    for any process): one error naming the variant, not a loop of fresh workers."""

    def dies(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(job, "_plain_rows", dies)
    items = [(V(n), BuildInfo(Path(f"{n}.cubin"), "13.0", "-O3")) for n in ("a", "b")]
    with pytest.raises(job.gpu.NoGpu, match=r"demo/a: the bench's worker process was killed "
                       r"by signal 9 while only recording it as failed \(crash\)"):  # fmt: skip
        job._run_in_workers(None, Study(), items, None, SLOT, True)


def test_a_failed_variant_without_record_failure_stops_the_bench(monkeypatch, tmp_path):
    """The quick loop (no --record-failure): a worker that fails exits 1, having said why;
    the bench stops there with that status."""

    def fails(*a, **k):
        raise job.ConfigError("demo/b: wrong")

    monkeypatch.setattr(job, "_plain_rows", fails)
    items = [(V("b"), BuildInfo(Path("b.cubin"), "13.0", "-O3"))]
    with pytest.raises(SystemExit) as e:
        job._run_in_workers(None, Study(), items, None, SLOT, False)
    assert e.value.code == 1


def test_a_bench_stopped_by_a_failed_variant_keeps_what_ran_before_it(monkeypatch, tmp_path):
    """The quick loop stopped at b: a's rows and samples, measured before it, go to the
    table (bench_variants writes them, then exits 1); c never runs."""
    log = tmp_path / "calls.txt"
    ok = stand_in({}, log)

    def b_fails(project, study, variant, *rest):
        if variant.id == "b":
            raise job.ConfigError("demo/b: wrong")
        return ok(project, study, variant, *rest)

    monkeypatch.setattr(job, "_plain_rows", b_fails)
    items = [(V(n), BuildInfo(Path(f"{n}.cubin"), "13.0", "-O3")) for n in ("a", "b", "c")]
    with pytest.raises(job.BenchStopped) as e:
        job._run_in_workers(None, Study(), items, None, SLOT, False)
    assert e.value.code == 1
    assert [r["variant"] for r in e.value.rows] == ["a"] and e.value.rows[0]["status"] == "ok"
    assert e.value.samples == [{"variant": "a", "ms": 1.0}]
    assert [line.split()[1] for line in log.read_text().splitlines()] == ["a"]

    # bench_variants: the rows written (its _finish), then the same exit
    written = []
    monkeypatch.setattr(job, "_build_or_record", lambda p, s, v, *a: BuildInfo(Path("x"), "", ""))
    monkeypatch.setattr(job.gpu, "acquire_slot", lambda **k: SLOT)
    monkeypatch.setattr(job.problems, "get", lambda name: None)
    monkeypatch.setattr(job, "_parse_sizes", lambda problem, sizes: None)
    monkeypatch.setattr(job, "_finish", lambda rows, *a, **k: written.append(rows) or 0)
    plain = type("P", (), {"is_tuned": False})
    variants = [type("W", (plain,), {"id": n})() for n in ("a", "b", "c")]
    study = type("S", (), {"name": "demo", "problem": "demo"})()
    with pytest.raises(SystemExit) as e:
        job.bench_variants(None, study, variants, out=str(tmp_path / "m.parquet"))
    assert e.value.code == 1
    assert [[r["variant"] for r in rows] for rows in written] == [["a"]]
    # the first variant failing: nothing ran, so no table is written, the same exit
    written.clear()
    with pytest.raises(SystemExit) as e:
        job.bench_variants(None, study, variants[1:], out=str(tmp_path / "m.parquet"))
    assert e.value.code == 1 and written == []


# ------------------------------------------------------------------------------------------
# The command line: `kernelbook bench STUDY TUNED --candidates --build-dir DIR`, checked
# before any GPU is asked for (these run without one)


def test_candidates_of_a_variant_that_is_not_tuned_is_an_error():
    proc = kb("bench", "sgemm", "01_naive", "--candidates", check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "kernelbook: error: bench --candidates: sgemm/01_naive is not autotuned "
        "(no candidates to bench)"
    )


def test_candidates_without_their_builds_name_the_missing_build_table(tmp_path):
    proc = kb("bench", "sgemm", "14_triton", "--candidates", "--build-dir", str(tmp_path),
              check=False)  # fmt: skip
    assert proc.returncode == 1
    first = cfg.load_project_file(REPO / "config" / "config.yaml").study("sgemm")
    cand = first.variant("14_triton").candidates[0]
    assert (
        f"kernelbook: error: sgemm/{cand}: no build table at "
        f"{tmp_path / cand / 'build.parquet'}" in proc.stderr
    )


def test_candidates_beside_a_plain_variant_bench_it_as_itself(tmp_path):
    """`bench STUDY PLAIN TUNED --candidates`: the plain step is benched beside the tuned
    one's candidates, in the order named (here the first build table looked for is the plain
    one's); only where no variant named is autotuned is --candidates an error."""
    proc = kb("bench", "sgemm", "01_naive", "14_triton", "--candidates", "--build-dir",
              str(tmp_path), check=False)  # fmt: skip
    assert proc.returncode == 1
    want = f"kernelbook: error: sgemm/01_naive: no build table at {tmp_path / '01_naive'}"
    assert want in proc.stderr, proc.stderr
    proc = kb("bench", "sgemm", "01_naive", "02_coalescing", "--candidates", check=False)
    assert proc.stderr.strip().splitlines()[-1] == (
        "kernelbook: error: bench --candidates: sgemm/01_naive, 02_coalescing is not "
        "autotuned (no candidates to bench)"
    )


def test_a_cubin_is_for_one_variant_not_a_tune_space():
    proc = kb("bench", "sgemm", "14_triton", "--candidates", "--cubin", "x.cubin", check=False)
    assert proc.returncode == 1
    assert "kernelbook: error: bench: --cubin is for one variant, not several" in proc.stderr


def test_a_kept_case_is_counted_by_its_inputs_outputs_guards_and_initial_values():
    """What keeping a size's checked inputs for its timing costs (bench.case_bytes): every
    device array the case holds, guard bands included, and a 0-d initial value not at all."""
    import numpy as np

    from kernelbook.measure.bench import case_bytes
    from kernelbook.problems.base import Case, GuardedArray

    y = GuardedArray(np, 100, np.float32, guard=8)
    case = Case(
        sizes={"N": 100},
        dtype="float32",
        seed=1,
        inputs={"x": np.zeros(100, np.float32), "w": np.zeros((3, 4), np.float64)},
        outputs={"y": y},
        initial={"y": np.zeros(100, np.float32), "s": np.asarray(0.0, np.float32)},
        reference={},
        args=(),
    )
    assert case_bytes(case) == 400 + 96 + (100 + 16) * 4 + 400


def test_workers_switching_the_gpus_lock_leave_one_ledger_line_a_span(monkeypatch, tmp_path):
    """The job holds its GPU's lock (a real flock) shared; each variant's worker checks with
    it shared and times with it alone (kernelbook.gpu.switch_mode on the lock's file, which
    the fork shares), the second variant in a fresh worker after the first lost its device.
    The ledger then has one line for each span, written by the process that held it, back
    to back and never overlapping, and none from the job's own process for the workers'
    time; the lock is the job's again at the end, and given back."""
    import fcntl

    from kernelbook import gpu, ledger, locks

    book = tmp_path / "ledger.tsv"
    monkeypatch.setenv(gpu.LEDGER_ENV, str(book))
    got = locks.take_lock(tmp_path, ["GPU-x"], shared=True)
    slot = gpu.Slot("GPU-x", 0, got[1], mode="shared", locks=tmp_path)
    gpu.hold_begins("GPU-x", shared=True)

    def rows(project, study, variant, info, sizes, slot, samples, record_failure):
        gpu.switch_mode(slot, shared=True)  # bench_variant's hold(True), then hold(False)
        gpu.switch_mode(slot, shared=False)
        failure = "crash" if variant.id == "a" else None  # a fresh worker for b
        return [{"variant": variant.id, "status": "failed" if failure else "ok",
                 "failure": failure, "reason": failure}]  # fmt: skip

    monkeypatch.setattr(job, "_plain_rows", rows)
    items = [(V(n), BuildInfo(Path(f"{n}.cubin"), "13.0", "-O3")) for n in "ab"]
    done, _ = job._run_in_workers(None, Study(), items, None, slot, True)
    assert [r["variant"] for r in done] == ["a", "b"]
    assert slot.mode is None  # as the last worker left it: known to no one here
    gpu.release_slot(slot)
    held = sorted(ledger.read(book), key=lambda h: h.start)
    # a: the job's shared start and a's checks, then a's timing; b: its checks (a fresh
    # worker: the lock's mode unknown, so taken shared again), then its timing
    assert [h.mode for h in held] == ["shared", "exclusive", "shared", "exclusive"], held
    assert len({h.pid for h in held[:2]}) == 1 and held[2].pid == held[3].pid != held[0].pid
    assert os.getpid() not in {h.pid for h in held}
    assert all(a.end <= b.start + 1e-3 for a, b in zip(held, held[1:], strict=False))
    with open(tmp_path / locks.lock_name("GPU-x"), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # given back: free for anyone

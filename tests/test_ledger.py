"""The GPU ledger: each process that held a GPU's lock appends its hold; read back, a run's
span splits into exclusive, shared-only and idle time per GPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernelbook import gpu, ledger
from kernelbook.ledger import Hold


def hold(a, b, mode="exclusive", job="bench sgemm 01", g="GPU-a"):
    return Hold(a, b, 1, mode, g, job)


def test_union_merges_overlaps_and_keeps_gaps():
    assert ledger.union([(0, 2), (1, 3), (5, 6)]) == 4
    assert ledger.union([(5, 6), (0, 1), (0.5, 0.75)]) == 2
    assert ledger.union([]) == 0


def test_summary_splits_the_span_into_exclusive_shared_and_idle():
    holds = [
        hold(0, 10),
        hold(12, 20, job="profile sgemm 01"),
        hold(19, 25, "shared", "sanitize sgemm 01"),
        hold(21, 24, "shared", "sanitize sgemm 02"),
        hold(0, 4, g="GPU-b"),
    ]
    s = ledger.summary(holds)
    assert s["span_s"] == 25
    a = s["gpus"]["GPU-a"]
    assert a == {"span_s": 25, "exclusive_s": 18, "shared_only_s": 5, "idle_s": 2}
    # each GPU over its own span (another machine of a resumed run is not idle in between)
    assert s["gpus"]["GPU-b"] == {"span_s": 4, "exclusive_s": 4, "shared_only_s": 0, "idle_s": 0}
    assert s["verbs"]["sanitize"] == {"holds": 2, "held_s": 9}
    assert s["verbs"]["bench"]["holds"] == 2


def test_summary_clips_to_a_span():
    s = ledger.summary([hold(0, 10), hold(20, 30)], span=(5, 25))
    assert s["gpus"]["GPU-a"] == {
        "span_s": 20, "exclusive_s": 10, "shared_only_s": 0, "idle_s": 10,
    }  # fmt: skip


def test_a_job_held_again_on_a_later_gpu_supersedes_its_earlier_holds():
    """A run resumed on another machine: a job held on the first GPU and again on the second
    (its outputs lost, or its inputs changed) counts once, from the second; a tuned variant's
    two jobs (candidates, winner) are two jobs; the kept holds are what the rows cost."""
    holds = [
        hold(0, 10, job="bench sgemm 10 candidates"),
        hold(10, 12, job="bench sgemm 10 winner"),
        hold(12, 20, job="bench sgemm 11"),  # cut short with the first machine
        hold(5000, 5010, job="bench sgemm 10 candidates", g="GPU-b"),  # inputs changed
        hold(5010, 5012, job="bench sgemm 10 winner", g="GPU-b"),
        hold(5012, 5020, job="bench sgemm 11", g="GPU-b"),
        hold(5020, 5030, "shared", "sanitize sgemm", g="GPU-b"),
        hold(20, 25, job="bench sgemm 12"),  # kept from the first machine
    ]
    s = ledger.summary(holds)
    assert s["superseded"] == {"holds": 3, "held_s": 20}
    assert s["kept"] == {"exclusive_s": 25, "shared_s": 10}
    text = ledger.report(holds)
    assert "superseded: 3 holds, 20 s" in text
    assert "kept (what the tables' rows cost): exclusive 25 s (0.4 min), shared 10 s" in text
    assert "over its 30 s, exclusive 20 s (67 %), shared only 10 s, idle 0 s (0 %)" in text


def test_job_label_leaves_out_options_and_the_settings():
    argv = ["--settings", '{"a": 1}', "bench", "sgemm", "01_naive", "--cubin", "x.cubin",
            "--record-failure", "--out", "t.parquet"]  # fmt: skip
    assert gpu.job_label(argv) == "bench sgemm 01_naive"
    # a study's one job, and a tune space's: flags take no value
    argv = ["--settings", "{}", "profile", "sgemm", "--all", "--build-dir", "results/build/sgemm",
            "--out", "p.parquet"]  # fmt: skip
    assert gpu.job_label(argv) == "profile sgemm"
    # a tuned variant's two GPU jobs: its candidates, its winner at the study's sizes
    argv = ["bench", "sgemm", "14_triton", "--candidates", "--build-dir", "b", "--out", "t"]
    assert gpu.job_label(argv) == "bench sgemm 14_triton candidates"
    argv = ["bench", "sgemm", "14_triton", "--tuned-table", "t.parquet", "--out", "t"]
    assert gpu.job_label(argv) == "bench sgemm 14_triton winner"


def test_a_process_that_held_a_gpu_appends_its_hold_at_exit(tmp_path):
    path = tmp_path / "ledger.tsv"
    code = (
        "import sys; from kernelbook import gpu; sys.argv = ['kernelbook', 'profile', 'w4a16',"
        " '09']; gpu.hold_begins('GPU-x', False)"
    )
    env = {**os.environ, gpu.LEDGER_ENV: str(path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
    subprocess.run([sys.executable, "-c", "import kernelbook.gpu"], env=env, check=True)
    holds = ledger.read(path)
    assert len(holds) == 2  # a process that held nothing writes nothing
    assert holds[0].job == "profile w4a16 09" and holds[0].mode == "exclusive"
    assert holds[0].end >= holds[0].start and holds[0].gpu == "GPU-x"
    assert "2 GPU holds" in ledger.report(holds)


def test_no_ledger_named_means_nothing_written(tmp_path, monkeypatch):
    monkeypatch.delenv(gpu.LEDGER_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    gpu.hold_begins("GPU-x", True)
    gpu.hold_ends()
    assert list(tmp_path.iterdir()) == []


def test_a_torn_line_is_skipped(tmp_path):
    p = tmp_path / "l.tsv"
    p.write_text("1.0\t2.0\t3\texclusive\tGPU-a\tbench s v\n1.5\t2.")
    assert [h.job for h in ledger.read(p)] == ["bench s v"]


@pytest.mark.parametrize("exists", [True, False])
def test_the_ledger_verb(tmp_path, exists, capsys):
    from kernelbook.cli import main

    p = tmp_path / "l.tsv"
    if exists:
        p.write_text("1.0\t3.0\t3\texclusive\tGPU-a\tbench s v\n")
    rc = main(["ledger", str(p)])
    out = capsys.readouterr()
    if exists:
        assert rc == 0 and "exclusive 2 s (100 %)" in out.out and "over its 2 s" in out.out
    else:
        assert rc == 1 and "no ledger at" in out.err


def test_a_job_gives_its_gpu_lock_back_when_its_gpu_work_is_done(tmp_path, monkeypatch):
    """release_slot: the next job takes the lock while this one still writes its tables; the
    ledger's hold ends there, once (not again at exit)."""
    from kernelbook import problems
    from kernelbook.measure import job

    ledger_file = tmp_path / "ledger.tsv"
    monkeypatch.setenv(gpu.LEDGER_ENV, str(ledger_file))
    got = gpu.take_lock(tmp_path, ["GPU-a"])
    assert got is not None and gpu.take_lock(tmp_path, ["GPU-a"]) is None  # held
    slot = gpu.Slot("GPU-a", 0, got[1])
    gpu.hold_begins("GPU-a", False)
    job._finish([], problems.get("gemm"), [], None, None, slot)  # a job's rows written
    assert slot.lock is None
    again = gpu.take_lock(tmp_path, ["GPU-a"])
    assert again is not None  # free for the next job
    again[1].close()
    gpu.hold_ends()  # what exit would run: nothing more to write
    assert len(ledger.read(ledger_file)) == 1
    gpu.release_slot(slot)  # twice, or a slot a parent holds (lock None): nothing

"""The GPU ledger: each process that held a GPU's lock appends its hold; read back, a run's
span splits into exclusive, shared-only and idle time per GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
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


RUN = Path(__file__).parent / "fixtures" / "h200-sgemm-run"  # a real run's ledger and rows


def test_a_real_runs_rows_lie_in_their_jobs_holds_and_no_hold_overlaps_a_timing():
    """sgemm's run on an H200 (its ledger and its tables' where-and-when columns): no hold
    overlaps an exclusive one, and each of its 635 rows was made on the GPU it names inside
    a hold of its own job, a timed one (status ok) inside an exclusive one, a skipped one
    (01_naive at 8192^3) while its job checked."""
    holds = ledger.read(RUN / "gpu-ledger.tsv")
    assert ledger.conflicts(holds) == []
    assert ledger.check(holds, [RUN]) == ([], 549 + 18 + 68)
    rows = pd.read_parquet(RUN / "measurements.parquet")
    assert set(rows["status"]) == {"ok", "skipped"}


def test_the_check_names_a_row_off_its_gpu_or_out_of_its_timing_and_an_overlap(tmp_path):
    """What the check catches, each by name: a row that names another GPU, a timed row made
    outside its job's exclusive hold (while it checked), a hold that overlaps another's
    timing on its GPU; shared holds side by side, and holds of two GPUs, are no conflict."""
    holds = ledger.read(RUN / "gpu-ledger.tsv")
    gpu = holds[0].gpu
    rows = pd.read_parquet(RUN / "measurements.parquet")
    ok = rows.index[(rows["variant"] == "02_coalescing") & (rows["status"] == "ok")]
    moved = rows.copy()
    moved.loc[ok[0], "gpu_uuid"] = "GPU-other"
    shared = next(
        h for h in holds if h.job == "bench sgemm 03_smem_blocking" and h.mode == "shared"
    )
    third = rows.index[(rows["variant"] == "03_smem_blocking") & (rows["status"] == "ok")]
    at = pd.Timestamp(round((shared.start + 0.01) * 1e6), unit="us", tz="UTC")
    moved.loc[third[0], "measured_at"] = at
    for name in ("profile", "sanitizer"):
        shutil.copy(RUN / f"{name}.parquet", tmp_path)
    moved.to_parquet(tmp_path / "measurements.parquet")
    problems, n = ledger.check(holds, [tmp_path])
    assert n == 635 and len(problems) == 2, problems
    assert problems[0].startswith("measurements sgemm 02_coalescing on GPU-other: 1 row(s)")
    assert problems[1].startswith(f"measurements sgemm 03_smem_blocking on {gpu}: 1 row(s) in ")
    assert "no exclusive hold" in problems[1]
    # a timing that overlaps another job's on one GPU; two shared holds; another GPU's hold
    timing = next(
        h for h in holds if h.job == "bench sgemm 05_blocktiling_2d" and h.mode == "exclusive"
    )
    mid = (timing.start + timing.end) / 2
    extra = [
        ledger.Hold(mid, mid + 1, 1, "exclusive", gpu, "bench sgemm intruder"),
        ledger.Hold(mid, mid + 1, 2, "exclusive", "GPU-other", "bench sgemm elsewhere"),
    ]
    found = ledger.conflicts(holds + extra)
    assert [(a.job, b.job) for a, b in found] == [
        ("bench sgemm 05_blocktiling_2d", "bench sgemm intruder")
    ]
    side = [
        ledger.Hold(1, 3, 1, "shared", "G", "sanitize s"),
        ledger.Hold(2, 4, 2, "shared", "G", "bench s v"),
    ]
    assert ledger.conflicts(side) == []
    assert (
        len(ledger.conflicts([*side, ledger.Hold(3.5, 5, 3, "exclusive", "G", "bench s w")])) == 1
    )


@pytest.mark.parametrize("broken", [False, True])
def test_the_ledger_verb_checks_a_run(tmp_path, broken, capsys):
    from kernelbook.cli import main

    p = tmp_path / "l.tsv"
    text = (RUN / "gpu-ledger.tsv").read_text()
    if broken:  # a second timing on the GPU over the profile's
        first = ledger.read(RUN / "gpu-ledger.tsv")[0]
        prof = next(h for h in ledger.read(RUN / "gpu-ledger.tsv") if h.job == "profile sgemm")
        line = [f"{prof.start + 1:.3f}", f"{prof.start + 2:.3f}", "9", "exclusive", first.gpu]
        text += "\t".join([*line, "bench sgemm x"]) + "\n"
    p.write_text(text)
    rc = main(["ledger", str(p), "--top", "0", "--check", "--tables", str(RUN)])
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    if broken:
        assert rc == 1 and "overlaps exclusive bench sgemm x" in out, out
        assert last.startswith("kernelbook ledger --check: 1 problem(s) in 444 holds on 1 GPU(s)")
    else:
        assert rc == 0 and last == (
            "kernelbook ledger --check: 0 problem(s) in 443 holds on 1 GPU(s) and 635 rows of "
            "1 table folder(s)"
        )


def test_a_tables_folder_without_tables_is_one_error_naming_it(tmp_path, capsys):
    from kernelbook.cli import main

    rc = main(
        ["ledger", str(RUN / "gpu-ledger.tsv"), "--check", "--tables", str(RUN), str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert rc == 1 and err.strip() == f"kernelbook ledger: no study tables in {tmp_path}", err

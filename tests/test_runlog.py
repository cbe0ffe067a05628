"""The run's own record (kernelbook.runlog): one segment per Snakemake invocation that
measures, its wall time, a segment cut short read up to its last job, a resumed run's wall
time as the sum of its segments, and the sentence the pages and the index carry. The
segments of a real Snakemake run in a copy of the repository (a target that needs no GPU,
for a GPU model named in the config)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import copy_repo, snakemake

from kernelbook import runlog
from kernelbook.report import quality


def _segment(folder: Path, name: str, started: float, ended: float | None, empty: bool):
    r = {"started": started, "started_at": runlog._iso(started), "git_commit": "abc",
         "hostname": "h", "gpus": [], "argv": [], "empty_at_start": empty}  # fmt: skip
    if ended is not None:
        r.update(ended=ended, ended_at=runlog._iso(ended), status=runlog.COMPLETE,
                 wall_s=ended - started)  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(r))


def _job(benchmarks: Path, name: str, at: float):
    p = benchmarks / "bench" / f"{name}.tsv"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("s\n1.0\n")
    os.utime(p, (at, at))


def test_a_cut_segment_ends_at_its_last_job_and_a_resumed_run_sums_its_segments(tmp_path):
    runs, bench = tmp_path / "runs", tmp_path / "benchmarks"
    t = 1_800_000_000.0
    _segment(runs, "a-old.json", t - 5000, t - 4000, empty=True)  # an earlier run
    _segment(runs, "b.json", t, None, empty=True)  # this run, cut short (never ended)
    _job(bench, "before", t - 10)  # a job of before: not the cut segment's
    _job(bench, "first", t + 100)
    _job(bench, "last", t + 600)
    _job(bench, "resumed", t + 2100)  # a job of the resumed segment, not the cut one's
    _segment(runs, "c.json", t + 2000, t + 2500, empty=False)  # the resume
    segs = runlog.segments(runs, bench)
    assert [s["status"] for s in segs] == ["complete", "cut", "complete"]
    cut = segs[1]
    assert cut["ended"] == t + 600 and cut["wall_s"] == 600  # up to its last job
    run = runlog.summary(segs)
    # from the last segment that began on an empty results/: 600 s cut + 500 s resumed
    assert run["wall_s"] == 1100 and run["segments"] == 2 and run["cut"] == 1
    assert run["from_empty"] and run["complete"]
    assert run["studies"] == []  # segments written before they named their studies
    text = runlog.text(run)
    assert text.startswith("The run that measured these tables took 18.3 min of wall time")
    assert "over 2 invocations (1 cut short and resumed)" in text and "from an empty" in text
    out = tmp_path / "study" / "run.json"
    assert runlog.write(runs, bench, out) == run
    assert json.loads(out.read_text())["run"] == run
    # the page's pipeline cost says it
    stages = __import__("pandas").DataFrame(
        [
            {
                "study": "s",
                "stage": "bench",
                "rule": "bench",
                "job": "x",
                "seconds": 1.0,
                "cpu_seconds": 1.0,
                "max_rss_mb": 1.0,
            }
        ]  # fmt: skip
    )
    assert text in quality.stages_section(stages, lambda x, d=4: f"{x:g}", run)
    assert runlog.write(tmp_path / "none", bench, tmp_path / "x.json") is None


def test_a_segment_after_one_that_made_only_job_tables_is_not_empty_at_start(tmp_path):
    """A book run's first invocation makes only the host-timed studies' bench tables (no
    study's measurements yet): the next one began on them, so the run is counted from the
    first (the H200 run at 18d7765 lost its first 135 s from its wall time)."""
    runs = tmp_path / "results" / "h200" / "runs"
    first = runlog.begin(runs, "abc", [], [], ["regimes"])
    assert json.loads(first.read_text())["empty_at_start"]
    runlog.end(first, runlog.COMPLETE)
    first.rename(runs / "00000000T000000-1.json")  # a name of its own within the second
    table = tmp_path / "results" / "h200" / "regimes" / "bench" / "01_scale_eager.parquet"
    table.parent.mkdir(parents=True)
    table.write_bytes(b"PAR1")
    second = runlog.begin(runs, "abc", [], [], ["regimes"])
    assert not json.loads(second.read_text())["empty_at_start"]
    runlog.end(second, runlog.COMPLETE)
    run = runlog.summary(runlog.segments(runs))
    assert run["segments"] == 2 and run["from_empty"] and run["complete"]
    # a record written before: both said empty; the first one's job still there says not
    for p in runs.glob("*.json"):
        p.write_text(json.dumps({**json.loads(p.read_text()), "empty_at_start": True}))
    benchmarks = tmp_path / "results" / "benchmarks"
    assert runlog.summary(runlog.segments(runs, benchmarks))["segments"] == 1
    began = json.loads((runs / "00000000T000000-1.json").read_text())["started"]
    _job(benchmarks, "regimes_01", began)
    assert runlog.summary(runlog.segments(runs, benchmarks))["segments"] == 2


def test_a_measuring_snakemake_run_records_its_segment(tmp_path):
    """Snakemake's onstart opens the segment and onsuccess closes it (a run for a GPU model
    of the config: results/<gpu>/runs/); a run that measures for no GPU records nothing."""
    repo = copy_repo(tmp_path / "repo")
    target = "results/build/sgemm/study.json"
    began = time.time()
    proc = snakemake(repo, "--cores", "1", target, "--config", "gpu_model=h200", "studies=[sgemm]")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    segs = runlog.segments(repo / "results" / "h200" / "runs")
    assert len(segs) == 1, segs
    s = segs[0]
    assert s["status"] == "complete" and 0 < s["wall_s"] < time.time() - began + 1
    assert target in s["argv"] and s["empty_at_start"]
    assert s["studies"] == ["sgemm"]  # which studies this invocation ran
    # nothing to do: no segment (Snakemake runs no hook)
    again = snakemake(repo, "--cores", "1", target, "--config", "gpu_model=h200", "studies=[sgemm]")
    assert again.returncode == 0
    assert len(runlog.segments(repo / "results" / "h200" / "runs")) == 1
    (repo / "results" / "build" / "sgemm" / "study.json").unlink()
    plain = snakemake(repo, "--cores", "1", target, "--config", "studies=[sgemm]")
    assert plain.returncode == 0
    assert len(runlog.segments(repo / "results" / "h200" / "runs")) == 1


def test_a_run_of_one_invocation_a_study_says_each_study_s_part(tmp_path):
    """Four invocations, one study each, the last cut short and never resumed: the run is
    not complete, but the studies measured before it are, and their pages say so."""
    runs, bench = tmp_path / "runs", tmp_path / "benchmarks"
    t = 1_800_000_000.0
    for i, (study, secs) in enumerate([("sgemm", 468), ("paged", 154), ("decode", 348)]):
        _segment(runs, f"{i}.json", t, t + secs, empty=i == 0)
        r = json.loads((runs / f"{i}.json").read_text())
        (runs / f"{i}.json").write_text(json.dumps({**r, "studies": [study]}))
        t += secs + 5
    _segment(runs, "3.json", t, None, empty=False)
    r = json.loads((runs / "3.json").read_text())
    (runs / "3.json").write_text(json.dumps({**r, "studies": ["w4a16"]}))
    _job(bench, "w4a16-first", t + 120)
    segs = runlog.segments(runs, bench)
    run = runlog.summary(segs, "sgemm")
    assert run["segments"] == 4 and run["cut"] == 1 and run["resumed"] == 0
    assert not run["complete"] and run["wall_s"] == 468 + 154 + 348 + 120
    assert run["study"] == {"name": "sgemm", "segments": 1, "wall_s": 468.0, "complete": True}
    text = runlog.text(run)
    assert "over 4 invocations (1 cut short), from an empty results/" in text
    assert text.endswith(
        ", not complete. sgemm was measured in 1 of them, 7.8 min (468 s), complete."
    )
    assert runlog.summary(segs, "w4a16")["study"]["complete"] is False
    # a study the run never named has no part of its own, and a run of that study alone
    # says nothing more
    assert "study" not in runlog.summary(segs, "hgemm")
    one = runlog.summary(segs[:1], "sgemm")
    assert runlog.text(one).endswith(
        "from an empty results/, " + one["started_at"] + " to " + one["ended_at"] + ", complete."
    )
    # the index: one line for the run, each study's own part after it
    from kernelbook.report import index

    worklogs = tmp_path / "worklogs"
    for study in ("sgemm", "paged"):
        out = worklogs / "h200" / study / "data" / "run.json"
        runlog.write(runs, bench, out, study)
    lines = [ln for ln in index.runs_lines(worklogs, [("h200", "paged"), ("h200", "sgemm")]) if ln]
    assert len(lines) == 1 and lines[0].startswith("**h200**, paged, sgemm: The run that")
    own = "Each study's own invocations: paged 2.6 min, complete; sgemm 7.8 min, complete."
    assert lines[0].endswith("not complete. " + own)


def test_one_invocation_for_several_studies_gives_them_no_parts_of_their_own(tmp_path):
    """One Snakemake invocation measured three studies: the index's line is the run's, and
    does not repeat its wall time as each study's own."""
    runs, bench = tmp_path / "runs", tmp_path / "benchmarks"
    t = 1_800_000_000.0
    _segment(runs, "0.json", t, t + 1296, empty=True)
    r = json.loads((runs / "0.json").read_text())
    (runs / "0.json").write_text(json.dumps({**r, "studies": ["attention", "paged", "w4a16"]}))
    from kernelbook.report import index

    worklogs = tmp_path / "worklogs"
    for study in ("attention", "paged", "w4a16"):
        runlog.write(runs, bench, worklogs / "h200" / study / "data" / "run.json", study)
    pairs = [("h200", s) for s in ("attention", "paged", "w4a16")]
    lines = [ln for ln in index.runs_lines(worklogs, pairs) if ln]
    assert len(lines) == 1 and lines[0].startswith("**h200**, attention, paged, w4a16: The run")
    assert "21.6 min of wall time (1296 s)" in lines[0]
    assert "Each study's own" not in lines[0] and lines[0].endswith(", complete.")

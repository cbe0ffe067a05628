"""The run's own record: when each Snakemake invocation that measured on a GPU began and
ended, so that a book run's wall time is a number the tables carry, also for a run cut
short and resumed.

A GPU run writes one *segment* file per invocation, ``results/<gpu>/runs/<start>.json``:
``begin`` at Snakemake's start (the commit, the host, the GPUs), ``end`` at its end
(complete or failed). A segment that never ended (the command's time limit, a machine that
went away) is read as ``cut``, ending at the last job that finished in it (the newest
benchmark file after its start). Resuming a run (the same results/, brought back) adds a
segment and re-measures nothing that is there; the run's wall time is the sum of its
segments' (``summary``), from the first one, made on an empty results/.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

COMPLETE, FAILED, CUT = "complete", "failed", "cut"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def begin(folder: str | Path, commit: str, gpus: list[str], argv: list[str], studies=()) -> Path:
    """Open this invocation's segment in ``folder`` (results/<gpu>/runs); its path. ``argv``:
    the target files (a rule target such as ``tables`` names none); ``studies``: the run's."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.time()
    path = folder / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(started))}-{os.getpid()}.json"
    record = {
        "started": started,
        "started_at": _iso(started),
        "git_commit": commit,
        "hostname": socket.gethostname(),
        "gpus": list(gpus),
        "argv": list(argv),  # the snakemake command line
        "studies": list(studies),  # the config's studies for this invocation
        # no measured table of this GPU yet: a study's measurements, or one job's (a book
        # run's first invocation makes only the host-timed studies' bench tables)
        "empty_at_start": not any(folder.parent.rglob("*.parquet")),
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def end(path: str | Path, status: str) -> None:
    """Close a segment (``complete`` or ``failed``)."""
    path = Path(path)
    record = json.loads(path.read_text())
    record.update(ended=time.time(), status=status)
    record["ended_at"] = _iso(record["ended"])
    record["wall_s"] = record["ended"] - record["started"]
    path.write_text(json.dumps(record, indent=1) + "\n")


def _last_job_end(benchmarks: Path, after: float, before: float | None) -> float | None:
    """The newest benchmark file written after ``after`` (and before ``before``, the next
    segment's start): when the last job of a cut segment finished."""
    newest = None
    for p in benchmarks.rglob("*.tsv"):
        m = p.stat().st_mtime
        if m >= after and (before is None or m < before) and (newest is None or m > newest):
            newest = m
    return newest


def segments(folder: str | Path, benchmarks: str | Path | None = None) -> list[dict]:
    """Every segment of the run in ``folder``, oldest first; one never ended reads as cut,
    ending at its last finished job (``benchmarks``: results/benchmarks)."""
    out = []
    files = sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []
    for i, p in enumerate(files):
        r = json.loads(p.read_text())
        r["segment"] = p.name
        if "ended" not in r:
            later = json.loads(files[i + 1].read_text())["started"] if i + 1 < len(files) else None
            last = _last_job_end(Path(benchmarks), r["started"], later) if benchmarks else None
            r.update(status=CUT, ended=last or r["started"])
            r["ended_at"] = _iso(r["ended"])
            r["wall_s"] = r["ended"] - r["started"]
        if out and r.get("empty_at_start") and benchmarks:
            # a job of the segment before, whose record is still here: results/ was not
            # emptied (a record written before begin() counted one job's tables as measured)
            prev = out[-1]
            done = _last_job_end(Path(benchmarks), prev["started"], prev["ended"] + 1e-3)
            r["empty_at_start"] = done is None
        out.append(r)
    return out


def summary(segs: list[dict], study: str | None = None) -> dict | None:
    """The run as a whole, from its last segment that began on an empty results/ (earlier
    ones made tables since measured again): its wall time (the segments' summed), segments,
    how many were cut (and of those, how many a later segment resumed), whether it began on
    an empty results/ and ended complete; None without segments. With ``study``, also that
    study's own part (``study``: the segments that named it, their wall time, and whether
    the last of them ended complete), which a run of several invocations, one study each,
    needs: its last invocation cut short leaves the run, not every study, incomplete."""
    if not segs:
        return None
    fresh = [i for i, s in enumerate(segs) if s.get("empty_at_start")]
    segs = segs[fresh[-1] :] if fresh else segs
    run = {
        "wall_s": float(sum(s["wall_s"] for s in segs)),
        "segments": len(segs),
        "cut": sum(s["status"] == CUT for s in segs),
        "resumed": sum(s["status"] == CUT for s in segs[:-1]),
        "from_empty": bool(segs[0].get("empty_at_start")),
        "complete": segs[-1]["status"] == COMPLETE,
        "started_at": segs[0]["started_at"],
        "ended_at": segs[-1]["ended_at"],
        "commits": sorted({s["git_commit"] for s in segs}),
        # segments written before they named their studies contribute none
        "studies": sorted({name for s in segs for name in s.get("studies", [])}),
        "hosts": sorted({s["hostname"] for s in segs}),
    }
    own = [s for s in segs if study in s.get("studies", [])]
    if study is not None and own:
        run["study"] = {
            "name": study,
            "segments": len(own),
            "wall_s": float(sum(s["wall_s"] for s in own)),
            "complete": own[-1]["status"] == COMPLETE,
        }
    return run


def text(run: dict | None) -> str:
    """One sentence on a run's wall time, for the pages (and one more on the study's own
    invocations, where the run measured other studies too)."""
    if not run:
        return ""
    minutes = run["wall_s"] / 60
    parts = [f"{minutes:.1f} min of wall time ({run['wall_s']:.0f} s)"]
    if run["segments"] > 1:
        if not run["cut"]:
            parts.append(f"over {run['segments']} invocations")
        else:  # a record written before resumes were counted had resumed them all
            cut, resumed = run["cut"], run.get("resumed", run["cut"])
            how = " and resumed" if resumed == cut else f", {resumed} resumed" if resumed else ""
            parts.append(f"over {run['segments']} invocations ({cut} cut short{how})")
    origin = "from an empty results/" if run["from_empty"] else "resuming earlier tables"
    state = "complete" if run["complete"] else "not complete"
    out = (
        f"The run that measured these tables took {', '.join(parts)}, {origin}, "
        f"{run['started_at']} to {run['ended_at']}, {state}."
    )
    own = run.get("study")
    if own and run.get("studies", []) != [own["name"]]:
        out += (
            f" {own['name']} was measured in {own['segments']} of them, "
            f"{own['wall_s'] / 60:.1f} min ({own['wall_s']:.0f} s), "
            f"{'complete' if own['complete'] else 'not complete'}."
        )
    return out


def write(
    runs: str | Path, benchmarks: str | Path, out: str | Path, study: str | None = None
) -> dict | None:
    """``out`` (a study's run.json): the run's summary (with ``study``'s own part) and its
    segments, as they stand now (a segment still open reads as cut at its last job); nothing
    where no segment exists."""
    segs = segments(runs, benchmarks)
    run = summary(segs, study)
    if run is None:
        return None
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({"run": run, "segments": segs}, indent=1) + "\n")
    return run

"""Where a run's GPU time went: the GPU ledger (kernelbook.gpu, $KERNELBOOK_GPU_LEDGER) read
back.

Each line is one process's hold of one GPU's lock in one mode: acquired and released (Unix
seconds), pid, exclusive (a bench's timing, a profile) or shared (compute-sanitizer, a
bench's checks and set-up: several at once; a bench job has a line for each span), the
GPU's UUID and the job. Over a run's span, per GPU, the time splits into exclusive
(something timed or profiled), shared only (checks and sanitizers, nothing timed) and idle
(no job held the GPU: start-up, compiles, Snakemake, the run's CPU stages). Idle time is what a
faster pipeline can win without touching a measurement; held time is cut by measuring less
or with less host work inside each hold.

`kernelbook ledger LEDGER --check [--tables DIR ...]` checks a run against it: no hold of a
GPU overlaps an exclusive hold of the same GPU (a timing or a profile had its GPU alone, on
one GPU or several), and every row of the tables named (a study's measurements, profile and
sanitizer tables) was made on the GPU it names, inside a hold of its own job there (a
measurement inside an exclusive one): its measured_at within the hold, its gpu_uuid the
hold's.

A run resumed on another machine (tools/restore-snapshot.py) has a ledger over several GPUs
and hours: each GPU's span is its own (first acquisition to last release on it), and a job
held again on a later GPU (its outputs were lost with the machine, or its inputs changed
before the resume) supersedes its earlier holds: those are counted apart, and the rest, the
kept holds, are what the tables' rows cost.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Hold:
    start: float
    end: float
    pid: int
    mode: str  # exclusive | shared
    gpu: str
    job: str

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def verb(self) -> str:
        return self.job.split(" ", 1)[0] if self.job else "?"


def read(path: str | Path) -> list[Hold]:
    """The ledger's holds; a line that is not one (cut short by a process killed while
    writing) is skipped."""
    holds = []
    for line in Path(path).read_text().splitlines():
        f = line.split("\t")
        if len(f) != 6:
            continue
        try:
            holds.append(Hold(float(f[0]), float(f[1]), int(f[2]), f[3], f[4], f[5]))
        except ValueError:
            continue
    return holds


def union(intervals) -> float:
    """Seconds covered by at least one of the (start, end) intervals."""
    total, last = 0.0, None
    for a, b in sorted(intervals):
        if last is None or a > last:
            total += b - a
            last = b
        elif b > last:
            total += b - last
            last = b
    return total


def summary(holds: list[Hold], span: tuple[float, float] | None = None) -> dict:
    """Per GPU over ``span`` (default: the first acquisition to the last release): seconds
    exclusive, shared only, idle; per verb: holds and held seconds (a shared verb's holds
    overlap, so its seconds may exceed the span)."""
    if not holds:
        return {"span_s": 0.0, "gpus": {}, "verbs": {}}
    t0, t1 = span or (min(h.start for h in holds), max(h.end for h in holds))
    clip = [
        Hold(max(h.start, t0), min(h.end, t1), h.pid, h.mode, h.gpu, h.job)
        for h in holds
        if h.end >= t0 and h.start <= t1
    ]
    gpus = {}
    for g in sorted({h.gpu for h in clip}):
        mine = [h for h in clip if h.gpu == g]
        g0 = t0 if span else min(h.start for h in mine)
        g1 = t1 if span else max(h.end for h in mine)
        ex = union((h.start, h.end) for h in mine if h.mode == "exclusive")
        either = union((h.start, h.end) for h in mine)
        gpus[g] = {
            "span_s": g1 - g0,
            "exclusive_s": ex,
            "shared_only_s": either - ex,
            "idle_s": (g1 - g0) - either,
        }
    verbs: dict[str, dict] = defaultdict(lambda: {"holds": 0, "held_s": 0.0})
    for h in clip:
        verbs[h.verb]["holds"] += 1
        verbs[h.verb]["held_s"] += h.seconds
    old = superseded(clip)
    kept = {"exclusive_s": 0.0, "shared_s": 0.0}
    for h in clip:
        if h not in old:
            kept["exclusive_s" if h.mode == "exclusive" else "shared_s"] += h.seconds
    return {
        "span_s": t1 - t0,
        "gpus": gpus,
        "verbs": dict(verbs),
        "superseded": {"holds": len(old), "held_s": sum(h.seconds for h in old)},
        "kept": kept,
    }


def superseded(holds: list[Hold]) -> set[Hold]:
    """The holds of a job that was held again on a later GPU (the job's last hold is on
    another GPU): a resumed run measured it again, so its rows come from the later one."""
    last: dict[str, Hold] = {}
    for h in sorted(holds, key=lambda h: h.start):
        last[h.job] = h
    return {h for h in holds if last[h.job].gpu != h.gpu}


def report(holds: list[Hold], top: int = 8) -> str:
    """The summary in words, and the longest holds."""
    s = summary(holds)
    if not s["gpus"]:
        return "the ledger holds no GPU job"
    span = s["span_s"]
    out = [f"{len(holds)} GPU holds over {span:.0f} s (first acquisition to last release)"]
    for g, v in s["gpus"].items():
        own = v["span_s"] or 1.0
        out.append(
            f"{g}: over its {v['span_s']:.0f} s, exclusive {v['exclusive_s']:.0f} s "
            f"({100 * v['exclusive_s'] / own:.0f} %), shared only {v['shared_only_s']:.0f} s, "
            f"idle {v['idle_s']:.0f} s ({100 * v['idle_s'] / own:.0f} %)"
        )
    for verb, v in sorted(s["verbs"].items(), key=lambda kv: -kv[1]["held_s"]):
        out.append(f"  {verb}: {v['holds']} holds, {v['held_s']:.0f} s held")
    sup, kept = s["superseded"], s["kept"]
    if sup["holds"]:
        out.append(
            f"superseded: {sup['holds']} holds, {sup['held_s']:.0f} s (jobs held again on a "
            "later GPU: a resumed run measured them again)"
        )
    out.append(
        f"kept (what the tables' rows cost): exclusive {kept['exclusive_s']:.0f} s "
        f"({kept['exclusive_s'] / 60:.1f} min), shared {kept['shared_s']:.0f} s"
    )
    out.append("longest holds:")
    for h in sorted(holds, key=lambda h: -h.seconds)[:top]:
        out.append(f"  {h.seconds:7.1f} s  {h.mode:9s}  {h.job}")
    return "\n".join(out)


def conflicts(holds: list[Hold]) -> list[tuple[Hold, Hold]]:
    """The pairs of holds of one GPU that overlap where either is exclusive (an exclusive hold
    is a timing or a profile: nothing else may hold its GPU meanwhile), earlier first."""
    by: dict[str, list[Hold]] = defaultdict(list)
    for h in holds:
        by[h.gpu].append(h)
    out = []
    for mine in by.values():
        mine.sort(key=lambda h: (h.start, h.end))
        for i, a in enumerate(mine):
            for b in mine[i + 1 :]:
                if b.start >= a.end:
                    break  # sorted by start: no later hold reaches back into a
                if "exclusive" in (a.mode, b.mode):
                    out.append((a, b))
    return out


# what made a table's rows: the verb of its jobs, and whether the rows were made under an
# exclusive hold (timed or profiled) or any
ROW_JOBS = {"measurements": ("bench", True), "profile": ("profile", True),
            "sanitizer": ("sanitize", False)}  # fmt: skip


def homeless(holds: list[Hold], table: str, rows) -> list[str]:
    """The rows of ``table`` (a study's measurements, profile or sanitizer table, as a
    DataFrame) that no hold of their own job covers: a job is its verb, the row's study and,
    where the job's label names one, the row's variant or the tuned variant it belongs to
    (a study profile's label names none); covered means on the row's GPU (gpu_uuid) and
    around its measured_at, and exclusive for a timed or profiled row (status ok; a skipped
    or failed one is made while the job checks, under its shared hold). One line a job and
    GPU with how many rows and when the first one was made."""
    verb, exclusive = ROW_JOBS[table]
    by_job: dict[tuple[str, str], list[Hold]] = defaultdict(list)
    for h in holds:
        words = h.job.split()
        if words[:1] == [verb] and len(words) >= 2:
            by_job[(words[1], words[2] if len(words) > 2 else "")].append(h)
    lost: dict[str, list] = defaultdict(list)
    for r in rows.itertuples(index=False):
        t = r.measured_at.timestamp()
        status = getattr(r, "status", None)
        alone = exclusive and (status is None or status != status or status == "ok")
        names = {str(r.variant), str(getattr(r, "tuned_from", "") or ""), ""}
        held = [
            h
            for n in names
            for h in by_job.get((r.study, n), [])
            if h.gpu == r.gpu_uuid
            and h.start <= t <= h.end
            and (h.mode == "exclusive" or not alone)
        ]
        if not held:
            lost[f"{table} {r.study} {r.variant} on {r.gpu_uuid}"].append((t, alone))
    return [
        f"{what}: {len(ts)} row(s) in no {'exclusive ' if any(a for _, a in ts) else ''}hold of "
        f"their job on that GPU (the first made at {min(t for t, _ in ts):.3f})"
        for what, ts in lost.items()
    ]


def check(holds: list[Hold], folders=()) -> tuple[list[str], int]:
    """What a run's ledger and tables (each folder: a study's tables, as published under
    worklogs/ or as results/ holds them) say went wrong, in words: holds that overlap an
    exclusive one (conflicts), rows outside their jobs' holds (homeless); [] for none. And
    how many rows were checked."""
    import pandas as pd

    out = [
        f"{a.gpu}: {a.mode} {a.job} ({a.start:.3f}-{a.end:.3f}) overlaps {b.mode} {b.job} "
        f"({b.start:.3f}-{b.end:.3f})"
        for a, b in conflicts(holds)
    ]
    checked = 0
    for folder in folders:
        for table in ROW_JOBS:
            path = Path(folder) / f"{table}.parquet"
            if not path.is_file():
                continue
            rows = pd.read_parquet(path)
            if not {"study", "variant", "gpu_uuid", "measured_at"} <= set(rows.columns):
                continue
            rows = rows.dropna(subset=["gpu_uuid", "measured_at"])
            rows = rows.drop_duplicates(["variant", "gpu_uuid", "measured_at"])  # a row a metric
            out += homeless(holds, table, rows)
            checked += len(rows)
    return out, checked


def main(args) -> int:
    """`kernelbook ledger`: the report, and with --check the check (exit 1 on a problem)."""
    if not Path(args.ledger).is_file():
        print(f"kernelbook ledger: no ledger at {args.ledger}", file=sys.stderr)
        return 1
    empty = [d for d in args.tables if not any(Path(d, f"{t}.parquet").is_file() for t in ROW_JOBS)]
    if empty:
        print(f"kernelbook ledger: no study tables in {', '.join(empty)}", file=sys.stderr)
        return 1
    holds = read(args.ledger)
    print(report(holds, top=args.top))
    if not args.check:
        return 0
    problems, checked = check(holds, args.tables)
    for p in problems:
        print(f"  {p}")
    gpus = len({h.gpu for h in holds})
    print(
        f"kernelbook ledger --check: {len(problems)} problem(s) in {len(holds)} holds on {gpus} "
        f"GPU(s) and {checked} rows of {len(args.tables)} table folder(s)"
    )
    return 1 if problems else 0

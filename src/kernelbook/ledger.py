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

A run resumed on another machine (tools/restore-snapshot.py) has a ledger over several GPUs
and hours: each GPU's span is its own (first acquisition to last release on it), and a job
held again on a later GPU (its outputs were lost with the machine, or its inputs changed
before the resume) supersedes its earlier holds: those are counted apart, and the rest, the
kept holds, are what the tables' rows cost.
"""

from __future__ import annotations

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

"""The pipeline's own cost: Snakemake's benchmark files of a study's jobs, as one table.

Every rule has a ``benchmark:`` file, results/benchmarks/<rule>/<gpu or build>/<study>/<job>.tsv,
whose first row holds the job's wall-clock seconds, CPU seconds and peak memory. A study's
stages table gathers those of the jobs its measured tables come from, each labelled with
its stage (compile, bench, device, profile, sanitize, render), so the worklog can say where
a run's time went.
"""

from __future__ import annotations

import csv
from pathlib import Path

STAGE_OF_RULE = {
    "compile": "compile",
    "build_table": "compile",
    "sass_table": "compile",
    "loop_table": "compile",
    "build_gate": "compile",
    "bench": "bench",
    "bench_candidates": "bench",
    "select_tuned": "bench",
    "bench_tuned_sweep": "bench",
    "measurements": "bench",
    "samples_table": "bench",
    "bench_gate": "bench",
    "stages": "bench",
    "device": "device",
    "profile": "profile",
    "profile_table": "profile",  # runs from before a study had one profile job
    "roofline": "profile",
    "sanitize": "sanitize",
    "sanitizer_table": "sanitize",  # runs from before a study had one sanitize job
    "sanitize_gate": "sanitize",
    "study_meta": "render",
    "study_figures": "render",
    "worklog": "render",
}
STAGES = ("compile", "bench", "device", "profile", "sanitize", "render")


def _float(v: str) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None  # Snakemake writes NA where it could not measure


def read_benchmark(path: str | Path, study: str) -> dict:
    """One row of the stages table from one benchmark file (path layout above)."""
    p = Path(path)
    parts = p.parts
    # results/benchmarks/<rule>/...: the rule is the folder right under "benchmarks"
    at = len(parts) - 1 - parts[::-1].index("benchmarks") if "benchmarks" in parts else -1
    rule = parts[at + 1] if at >= 0 else p.parent.parent.parent.name
    job = p.stem
    with open(p, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows:
        raise ValueError(f"{p}: empty benchmark file")
    r = rows[0]
    rss = _float(r.get("max_rss"))
    return {
        "study": study,
        "stage": STAGE_OF_RULE.get(rule, "other"),
        "rule": rule,
        "job": job,
        "seconds": _float(r.get("s")),
        "cpu_seconds": _float(r.get("cpu_time")),
        "max_rss_mb": rss,
    }


def table(paths, study: str) -> list[dict]:
    return [read_benchmark(p, study) for p in paths]


def summary(rows) -> list[dict]:
    """Per stage: jobs, summed job seconds, the longest job (order of STAGES)."""
    import pandas as pd

    df = pd.DataFrame(list(rows)) if not isinstance(rows, pd.DataFrame) else rows
    out = []
    if df.empty:
        return out
    for stage in (*STAGES, "other"):
        part = df[df["stage"] == stage]
        if part.empty:
            continue
        longest = part.loc[part["seconds"].fillna(0).idxmax()]
        out.append(
            {
                "stage": stage,
                "jobs": len(part),
                "seconds": float(part["seconds"].fillna(0).sum()),
                "longest_job": f"{longest['rule']} {longest['job']}",
                "longest_seconds": float(longest["seconds"] or 0),
            }
        )
    return out

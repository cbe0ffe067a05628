"""How trustworthy a study's numbers are, for its page: the baseline's spread across jobs,
how the stopping rule ended each measurement, the raw samples at the headline size, what
the pipeline itself cost (kernelbook.report.pipeline_cost), and the same study before and after a
change of method."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kernelbook import runlog, tables
from kernelbook.layout import RANGED_PROFILE_REPORT, STUDY_PROFILE_REPORT
from kernelbook.report import compare, pipeline_cost, plot
from kernelbook.report.data import copy_word

# The stable-denominator bound: a baseline's median at one size may spread by at most this
# (max over min) across the jobs of one run; the page flags sizes above it.
SPREAD_BOUND_PCT = 2.0


def baseline_spread(meas: pd.DataFrame) -> pd.DataFrame:
    """Per size: how many jobs timed the baseline, and its median's min, median, max and
    spread (max / min - 1) across them. Where the variants have different baseline calls
    (baseline_mode: the regimes study's eager scale, chain, sum, ...), per baseline call and
    size, with the call in a ``baseline`` column: only the same call compares across jobs."""
    cols = ["size", "jobs", "min_ms", "median_ms", "max_ms", "spread_pct"]
    ok = meas[(meas["status"] == "ok") & meas["baseline_median_ms"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    modes = ok["baseline_mode"].fillna("") if "baseline_mode" in ok else None
    by_call = modes is not None and modes.nunique() > 1
    keys = [modes.rename("baseline"), ok["size"]] if by_call else [ok["size"]]
    g = ok.groupby(keys, sort=False)["baseline_median_ms"]
    out = pd.DataFrame(
        {"jobs": g.size(), "min_ms": g.min(), "median_ms": g.median(), "max_ms": g.max()}
    )
    out["spread_pct"] = 100.0 * (out["max_ms"] / out["min_ms"] - 1.0)
    order = ok.drop_duplicates("size").sort_values(["flop", "bytes_min"], kind="stable")["size"]
    rank = {size: i for i, size in enumerate(order)}
    out = out.reset_index()
    out = out.sort_values(
        [*(["baseline"] if by_call else []), "size"],
        key=lambda c: c.map(rank) if c.name == "size" else c,
        kind="stable",
    )
    return out[[*(["baseline"] if by_call else []), *cols]].reset_index(drop=True)


def stop_reasons(meas: pd.DataFrame) -> str:
    """'354 of 354 converged (converged 354)', or a dash for tables measured before the
    stopping rule recorded why it stopped."""
    ok = meas[meas["status"] == "ok"]
    if ok.empty:
        return "-"
    conv = int(ok["converged"].fillna(False).astype(bool).sum())
    text = f"{conv} of {len(ok)} converged"
    if "stop_reason" in ok and ok["stop_reason"].notna().any():
        counts = ok["stop_reason"].fillna("not recorded").value_counts()
        text += " (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")"
    return text


def timer_description(meas: pd.DataFrame) -> str:
    """What the rows' headline times are, by instrument (timing_method)."""
    methods = set(meas["timing_method"].dropna()) if "timing_method" in meas else set()
    said = []
    if "cupti" in methods:
        said.append(
            "kernel time from CUPTI activity records (each call's first kernel start to its "
            "last kernel end), the blocking-kernel CUDA events beside it (event_median_ms)"
        )
    if "host" in methods:
        said.append(
            "host wall time per call over batches of back-to-back calls (batch_calls each, "
            "one synchronisation at the end of a batch): what a call costs its caller, host "
            "included; no kernel time and no events for these rows"
        )
    if methods - {"cupti", "host"} or not said:
        if "blocking_kernel" in meas and meas["blocking_kernel"].fillna(False).astype(bool).any():
            said.append(
                "CUDA events, each sample queued behind a blocking kernel (no host time in it)"
            )
        else:
            said.append(
                "CUDA events, launched by the host after the flush (before the blocking-kernel "
                "timer)"
            )
    return "; ".join(said)


def sample_rows(meas: pd.DataFrame, samples: pd.DataFrame, size: str) -> pd.DataFrame:
    """The samples behind each non-candidate row at ``size``, labelled with the row's
    variant: those of the row's own bench job (compare.row_key; in tables without the job
    column, a tuned row's are the winning candidate's, both of its jobs pooled)."""
    rows = meas[(meas["size"] == size) & (meas["status"] == "ok")]
    rows = rows[rows["variant_kind"] != "candidate"]
    at = samples[samples["size"] == size]
    jobs = at["job"].where(at["job"].notna(), at["variant"]) if "job" in at else at["variant"]
    have = set(zip(at["study"], jobs, at["size"], strict=True))
    exact = compare.has_jobs(samples)
    out = []
    for _, r in rows.iterrows():
        study, job, _ = compare.row_key(r, have, exact)
        s = at[(at["study"] == study) & (jobs == job)]
        if len(s):
            out.append(s.assign(row=r["variant"]))
    return pd.concat(out, ignore_index=True) if out else samples.iloc[0:0].assign(row=[])


def distribution(
    meas: pd.DataFrame, samples: pd.DataFrame | None, order: list[str], outdir, *, size_label: str
) -> plot.Figure:
    """Every sample at the headline size, relative to its own median, variant and baseline."""
    if samples is None or samples.empty:
        raise plot.NoData("no samples table (samples.parquet) for this study")
    s = sample_rows(meas, samples, size_label)
    if s.empty:
        raise plot.NoData(f"no samples at {size_label}")
    vs = [v for v in order if v in set(s["row"])]
    med = s.groupby(["row", "function"])["ms"].transform("median")
    s = s.assign(
        rel=100.0 * (s["ms"] / med - 1.0), pos=s["row"].map({v: i for i, v in enumerate(vs)})
    )
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(vs) + 2.5), 4.4))
    shift = {"variant": -0.2, "baseline": 0.0, "copy": 0.2}
    colors = {"variant": "tab:blue", "baseline": "tab:gray", "copy": "tab:green"}
    rng = np.random.default_rng(0)  # jitter only: the figure is the same every render
    for fn, part in s.groupby("function"):
        x = part["pos"] + shift.get(fn, 0.0) + rng.uniform(-0.07, 0.07, len(part))
        ax.scatter(x, part["rel"], s=4, alpha=0.35, color=colors.get(fn, "black"), label=fn)
    ax.axhline(0, color="black", linewidth=0.6)
    lo, hi = np.percentile(s["rel"], [0.5, 99.5])
    ax.set_ylim(min(lo, -1.0) * 1.2, max(hi, 1.0) * 1.2)
    ax.set_xticks(range(len(vs)), vs, rotation=30, ha="right")
    ax.set_ylabel("sample vs its median (%)")
    ax.set_title(f"Every timed sample at {size_label}")
    ax.legend(loc="upper right", markerscale=3, fontsize=7)
    caption = (
        "Each dot is one timed launch (cold L2), relative to the median of its own "
        "measurement; the baseline (and the copy, for bandwidth-bound studies) was sampled "
        "alternately with the variant in the same job. The 0.5 to 99.5 percentiles are shown."
    )
    return plot.save(
        fig, outdir, "distribution", "Sample distribution at the headline size", caption
    )


def spread_section(meas: pd.DataFrame, baseline: str, fmt) -> list[str]:
    t = baseline_spread(meas)
    if t.empty:
        return []
    over = t[t["spread_pct"] > SPREAD_BOUND_PCT]
    L = [
        "## The baseline across jobs",
        "",
        f"Every job times {baseline} beside its variant. How much its median moves between the "
        f"jobs of this run (spread: max over min, minus one; the bound is {SPREAD_BOUND_PCT:g} %):",
        "",
    ]
    by_call = "baseline" in t.columns
    if by_call:
        L[-1] = L[-1].replace(
            "minus one;", "minus one, between the jobs that time the same baseline call;"
        )
    L += [
        ("| baseline " if by_call else "") + "| size | jobs | min ms | median ms | max ms | "
        "spread % |",
        ("|---" if by_call else "") + "|---|--:|--:|--:|--:|--:|",
    ]
    for r in t.itertuples():
        bold = "**" if r.spread_pct > SPREAD_BOUND_PCT else ""
        L.append(
            (f"| {r.baseline} " if by_call else "")
            + f"| {r.size} | {r.jobs} | {fmt(r.min_ms)} | {fmt(r.median_ms)} | "
            f"{fmt(r.max_ms)} | {bold}{fmt(r.spread_pct, 3)}{bold} |"
        )
    L.append("")
    if len(over):
        where = "; ".join(
            (f"{r.baseline} at " if by_call else "")
            + f"{r.size} ({fmt((r.max_ms - r.min_ms) * 1e3, 3)} us between the extremes)"
            for r in over.itertuples()
        )
        L.append(f"Over the bound at {where}.")
        L.append("")
    return L


def bench_time(meas: pd.DataFrame | None) -> dict | None:
    """Where the bench jobs' seconds went, from the measurement rows' own clocks: start-up
    (interpreter, imports), waiting for the GPU, set-up (CUDA, timer, kernel), checking and
    timing; None for tables measured before the rows kept them."""
    need = ("job_startup_s", "job_wait_s", "init_s", "check_s", "timing_s")
    if meas is None or not set(need) <= set(meas.columns) or meas["timing_s"].isna().all():
        return None
    # a job's rows share its start-up and wait: a plain variant's job is its variant; a
    # tuned variant's candidates, benched in one job, share both clocks (tables from when
    # each candidate had a job of its own have a pair of clocks a candidate)
    cand = meas["variant_kind"] == "candidate"
    key = meas["variant"].where(~cand, "candidates of " + meas["tuned_from"].astype(str))
    jobs = meas.assign(_job=key).groupby(
        ["_job", "job_startup_s", "job_wait_s"], sort=False, dropna=False
    )
    spent = {
        "jobs": int(jobs.ngroups),
        "startup": float(jobs["job_startup_s"].first().sum()),
        "wait": float(jobs["job_wait_s"].first().sum()),
        # a tuned variant's job sets up once per candidate it runs
        "init": float(meas.drop_duplicates(["variant", "tuned_from", "init_s"])["init_s"].sum()),
        "check": float(meas["check_s"].sum()),
        "timing": float(meas["timing_s"].sum()),
    }
    if "sampling_s" in meas.columns and meas["sampling_s"].notna().any():
        # the timing's split: inputs and baselines set up, then the samples
        spent["sampling"] = float(meas["sampling_s"].sum())
        spent["timing_setup"] = spent["timing"] - spent["sampling"]
    return spent


def profile_time(prof: pd.DataFrame | None) -> dict | None:
    """Where the profile jobs' seconds went, from the profile rows' own clocks: start-up,
    waiting for the GPU, the ncu processes (each size's share) and reading their reports;
    None for tables measured before the rows kept them."""
    need = ("job_startup_s", "job_wait_s", "ncu_s", "read_s")
    if prof is None or not set(need) <= set(prof.columns) or prof["ncu_s"].isna().all():
        return None
    sizes = prof.drop_duplicates(["variant", "size"])
    # a job's rows share its start-up and wait (a study's one profile job, or, in tables
    # from before it, a job a variant)
    jobs = sizes.groupby(["job_startup_s", "job_wait_s"], sort=False, dropna=False)
    ran = sizes[sizes["ncu_s"].notna()]
    # a report is one ncu process: the study's (its named kernels, its ranged ones), or
    # one in a variant's own folder
    shared = {f"{STUDY_PROFILE_REPORT}.ncu-rep", f"{RANGED_PROFILE_REPORT}.ncu-rep"}
    mine = ~ran["report"].isin(shared)
    report = ran["report"].where(~mine, ran["variant"] + "/" + ran["report"])
    return {
        "jobs": int(jobs.ngroups),
        "sizes": int(len(ran)),
        "processes": int(report.nunique()),
        "startup": float(jobs["job_startup_s"].first().sum()),
        "wait": float(jobs["job_wait_s"].first().sum()),
        "ncu": float(sizes["ncu_s"].sum()),
        "read": float(sizes["read_s"].sum()),
    }


def stages_section(
    table: pd.DataFrame | None,
    fmt,
    run: dict | None = None,
    meas: pd.DataFrame | None = None,
    prof: pd.DataFrame | None = None,
) -> list[str]:
    if table is None or table.empty:
        return []
    rows = pipeline_cost.summary(table)
    L = [
        "## What the pipeline cost",
        "",
        "Wall-clock seconds of the jobs this study's tables come from (Snakemake's "
        "`benchmark:` files; jobs of one stage may have run side by side, and a GPU job's "
        "time includes its wait for the GPU's lock):",
        "",
        "| stage | jobs | job seconds | longest job | its seconds |",
        "|---|--:|--:|---|--:|",
    ]
    L += [
        f"| {r['stage']} | {r['jobs']} | {fmt(r['seconds'], 3)} | {r['longest_job']} | "
        f"{fmt(r['longest_seconds'], 3)} |"
        for r in rows
    ]
    L.append("")
    spent = bench_time(meas)
    if spent:
        cols = ["start-up", "waiting for the GPU", "set-up", "checking", "timing"]
        keys = ["startup", "wait", "init", "check", "timing"]
        if "sampling" in spent:
            cols[-1:] = ["timing: inputs and baselines", "timing: samples"]
            keys[-1:] = ["timing_setup", "sampling"]
        L += [
            f"Inside the {spent['jobs']} bench jobs (their rows' own clocks, seconds summed):",
            "",
            "| " + " | ".join(cols) + " |",
            "|" + "--:|" * len(cols),
            "| " + " | ".join(fmt(spent[k], 3) for k in keys) + " |",
            "",
        ]
    spent = profile_time(prof)
    if spent:
        L += [
            f"Inside the {spent['jobs']} profile jobs ({spent['sizes']} sizes profiled by "
            f"{spent['processes']} ncu processes; their rows' own clocks, seconds summed):",
            "",
            "| start-up | waiting for the GPU | ncu (launch helper, replays) | reading reports |",
            "|--:|--:|--:|--:|",
            "| " + " | ".join(fmt(spent[k], 3) for k in ("startup", "wait", "ncu", "read")) + " |",
            "",
        ]
    if run:
        L += [runlog.text(run), ""]
    return L


# ------------------------------------------------------------------------------------------
# Before and after a change of method: the same study published at two commits


def compared_sizes(meas: pd.DataFrame, headline: str | None) -> list[str]:
    """The study's two smallest sizes (by bytes, then FLOPs) and its headline size."""
    ok = meas[meas["status"] == "ok"].drop_duplicates("size")
    order = list(ok.sort_values(["bytes_min", "flop"], kind="stable")["size"])
    picked = order[:2] + ([headline] if headline and headline not in order[:2] else [])
    return picked


def before_after(before: pd.DataFrame, after: pd.DataFrame, headline: str | None) -> str:
    """Markdown: each variant's % of baseline (of copy, for bandwidth-bound studies) before
    and after, at the two smallest sizes and the headline size."""

    def pivot(m):
        m = m[(m["status"] == "ok") & (m["variant_kind"] != "candidate")]
        col = "pct_of_copy" if m["pct_of_copy"].notna().any() else "pct_of_baseline"
        return m.pivot_table(index="variant", columns="size", values=col), col

    a, col = pivot(before)
    b, _ = pivot(after)
    sizes = compared_sizes(after, headline)
    what = f"% of {copy_word(after)}" if col == "pct_of_copy" else "% of baseline"

    def cell(t, v, s):
        x = t.loc[v, s] if v in t.index and s in t.columns else float("nan")
        return "-" if pd.isna(x) else f"{x:.1f}"

    lines = [
        "| variant | " + " | ".join(f"{s}: before -> after" for s in sizes) + " |",
        "|---|" + "--:|" * len(sizes),
    ]
    for v in sorted(set(a.index) | set(b.index)):
        lines.append(
            f"| {v} | " + " | ".join(f"{cell(a, v, s)} -> {cell(b, v, s)}" for s in sizes) + " |"
        )
    return f"{what} ({col})\n\n" + "\n".join(lines) + "\n"


def before_after_file(name: str | None = None) -> str:
    """before-after.md, or before-after-NAME.md: one file a change of method."""
    if name is None:
        return "before-after.md"
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
        raise SystemExit(
            f"kernelbook before-after: --name {name!r}: lower-case letters, digits, - and _"
        )
    return f"before-after-{name}.md"


def write_before_after(rev: str, folders, after: str | None = None, name: str | None = None) -> int:
    """`kernelbook before-after REV [--after REV2] [--name NAME] worklogs/<gpu>/<study> ...`:
    write each folder's before-after.md (before-after-NAME.md: a later change of method
    beside an earlier one's file), comparing the measurements published at git revision REV
    with those published at REV2 (default: those in data/ now). Both revisions are written
    as commits, so the file stays true, and its regenerate line reproducible, after the study
    is published again (publish keeps the files: each records a change of method, not a
    run)."""
    import json
    import subprocess
    from pathlib import Path

    def commit(r: str) -> str:
        proc = subprocess.run(
            ["git", "rev-parse", "--short", f"{r}^{{commit}}"], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise SystemExit(f"kernelbook before-after: {r!r} is not a git revision")
        return proc.stdout.strip()

    def at(r: str, path: Path) -> pd.DataFrame:
        proc = subprocess.run(["git", "show", f"{r}:{path.as_posix()}"], capture_output=True)
        if proc.returncode != 0:
            raise SystemExit(f"kernelbook before-after: {path} is not in git at {r}")
        return tables.read(proc.stdout)

    out = before_after_file(name)
    rev = commit(rev)
    after = commit(after) if after else None
    for folder in map(Path, folders):
        data = folder / "data" / "measurements.parquet"
        before = at(rev, data)
        now = at(after, data) if after else tables.read(data)
        meta = json.loads((folder / "data" / "study.json").read_text())
        measured = ", ".join(sorted(set(now["git_commit"].astype(str))))
        was = ", ".join(sorted(set(before["git_commit"].astype(str))))
        where = f"those published at {after}" if after else "those in data/"
        pinned = rev + (f" --after {after}" if after else "") + (f" --name {name}" if name else "")
        text = (
            f"# {folder.name} on {folder.parent.name}: before and after\n\n"
            f"Before: the measurements published at {rev} (measured at {was}). After: "
            f"{where} (measured at {measured}).\n\n"
            + before_after(before, now, meta.get("headline"))
            + f"\nRegenerate: `kernelbook before-after {pinned} {folder}`\n"
        )
        (folder / out).write_text(text)
        print(f"{folder}/{out}")
    return 0

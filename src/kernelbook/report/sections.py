"""The page's sections around the ladder: failures, provenance and how to regenerate, what to
read first, extra baselines, and the full table of measurements."""

from __future__ import annotations

import re

import pandas as pd

from kernelbook import tables
from kernelbook.report import quality
from kernelbook.report.data import (
    StudyData,
    baseline_label,
    candidate_rows,
    failures,
    headline_size,
    ladder_order,
    main_rows,
    sizes_by_flop,
)
from kernelbook.report.markdown import (
    DASH,
    distinct,
    esc,
    fmt,
    inline_code,
    is_true,
    isnull,
    md_table,
    point_label,
)
from kernelbook.report.stale import ADDED


def _slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200', the <gpu> of a published folder (as kernelbook.gpu.slug)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def failures_section(data: StudyData) -> list[str]:
    """Markdown lines of the page's first section when something failed (else none)."""
    found = failures(data)
    if not found:
        return []
    groups: dict[tuple, list] = {}
    for f in found:
        groups.setdefault((f.variant, f.stage, f.kind, f.expected), []).append(f)
    bad = sum(1 for f in found if not f.expected)
    L = ["## Failures", ""]
    L.append(
        f"{len(found)} (variant, size) failed"
        + (f", {bad} of them unexpectedly" if bad else ", all as their negative control expects")
        + ": their rows hold no timing, and the rest of this page shows what did run. "
        + ("The run that made this page exited non-zero (bench gate)." if bad else "")
    )
    L.append("")
    rows = []
    for (variant, stage, kind, expected), fs in groups.items():
        msg = " ".join(str(fs[0].message or "").split())
        rows.append(
            [
                f"**{variant}**",
                ", ".join(dict.fromkeys(f.size for f in fs)),
                stage,
                kind,
                "expected" if expected else "**unexpected**",
                esc(msg if len(msg) <= 300 else msg[:297] + "..."),
            ]
        )
    L.append(md_table(["variant", "sizes", "stage", "kind", "", "message"], rows, "llllll"))
    L.append("")
    return L


def extra_baselines_lines(head: pd.DataFrame, best: str, fom: str, unit: str) -> list[str]:
    """A study with several baselines: the others at the headline size, against the best."""
    names = tables.extra_baseline_names(head)
    if not names:
        return []
    wide = tables.extra_baseline_columns(head)
    row = wide[(wide["variant"] == best) & (wide["status"] == "ok")]
    if row.empty:
        return []
    r = row.iloc[0]
    parts = [
        f"{n} {fmt(r.get(f'{n}_{fom}'))} {unit} ({best} at {fmt(r.get(f'pct_of_{n}'))} % of it)"
        for n in names
        if r.get(f"{n}_{fom}") is not None
    ]
    return [f"**Also timed beside it:** {'; '.join(parts)}.", ""] if parts else []


def provenance(data: StudyData) -> dict[str, str]:
    """One block of where and how the numbers were made (all rows, every distinct value)."""
    m = data.measurements
    ok = m[m["status"] == "ok"]
    dates = pd.to_datetime(m["measured_at"], utc=True)

    def clock(col_min: str, col_med: str) -> str:
        lo = pd.to_numeric(ok.get(col_min), errors="coerce").dropna()
        med = pd.to_numeric(ok.get(col_med), errors="coerce").dropna()
        if med.empty:
            return DASH
        return f"min {fmt(lo.min() if len(lo) else med.min())} MHz, median {fmt(med.median())} MHz"

    build = data.table("build")
    out = {
        "GPU": distinct(m, "gpu_name"),
        "GPU UUID": distinct(m, "gpu_uuid"),
        "driver": distinct(m, "driver_version"),
        "CUDA runtime (driver supports)": (
            f"{distinct(m, 'cuda_version')} ({distinct(m, 'cuda_driver_version')})"
        ),
        "SM clock observed": clock("sm_clock_min_mhz", "sm_clock_mhz"),
        "memory clock observed": clock("mem_clock_mhz", "mem_clock_mhz"),
        "temperature max": f"{fmt(pd.to_numeric(ok.get('temperature_c'), errors='coerce').max())}"
        " C",
        "measured": (
            f"{dates.min():%Y-%m-%d %H:%M} to {dates.max():%Y-%m-%d %H:%M} UTC"
            if len(dates)
            else DASH
        ),
        "git commit": distinct(m, "git_commit"),
        "seed": distinct(m, "seed"),
        "cache": distinct(m, "cache")
        + (
            f" (L2 flush {fmt(m['flush_bytes'].max() / 2**20)} MiB before each sample)"
            if "flush_bytes" in m and m["flush_bytes"].max() > 0
            else ""
        ),
        "timing": distinct(m, "timing_method") + ": " + quality.timer_description(m),
        "stopping": quality.stop_reasons(m),
        "baseline": distinct(m, "baseline_mode") or distinct(m, "baseline"),
        "compiler": f"nvcc {distinct(m, 'nvcc_version')}, {distinct(m, 'arch')}, "
        f"flags {distinct(m, 'nvcc_flags')}",
        "software": distinct(m, "software"),
        "host": distinct(m, "hostname")
        + (f" ({distinct(m, 'host_cpu')})" if distinct(m, "host_cpu") else ""),
        "kernelbook": distinct(m, "kernelbook_version"),
    }
    if build is not None:
        out["build commit"] = distinct(build, "git_commit")
    prof = data.table("profile")
    if prof is not None:
        out["profiler"] = (
            f"Nsight Compute {distinct(prof, 'ncu_version')}, "
            f"clock control {distinct(prof, 'clock_control')}"
        )
    return out


def regenerate_commands(data: StudyData, worklogs: str = "worklogs") -> str:
    """The exact commands that remake this page, and the numbers under it."""
    m = data.measurements
    gpu = distinct(m, "gpu_name") or "the GPU"
    where = f"{worklogs}/{_slug(gpu.split(', ')[0])}/{data.study}"
    # Rows resumed from an earlier run keep the commit they were measured at; kernelbook check
    # holds each row's source hash, so the newest commit measured reproduces every row.
    by_time = m.assign(_t=pd.to_datetime(m["measured_at"], utc=True)).sort_values("_t")
    commits = [str(c) for c in dict.fromkeys(by_time["git_commit"].dropna())]
    commit = commits[-1].removesuffix("-dirty") if commits else "<commit>"
    dirty = any(c.endswith("-dirty") for c in commits)
    lines = []
    if data.mode == "replay":
        lines += [
            f"# render this page from the published data in {where}/data (no GPU needed)",
            "snakemake --cores 1 all",
            "",
        ]
    lines += [
        f"# measure again, on a machine with an {gpu}"
        + (" (the tree measured had uncommitted changes)" if dirty else ""),
        *(
            [
                f"# rows measured at {len(commits)} commits ({', '.join(c[:7] for c in commits)}); "
                "`kernelbook check` compares each row's source hash with the newest"
            ]
            if len(commits) > 1
            else []
        ),
        f"git checkout {commit}",
        "snakemake --cores 1 all",
        f"snakemake --cores 1 publish    # copies tables, figures and this page to {where}/",
        "",
        "# one variant at the headline size, outside the DAG",
        f"kernelbook bench {data.study} <variant> --size {headline_size(data) or '<size>'}",
        "# are the published numbers still those of the current sources?",
        "kernelbook check",
    ]
    return "\n".join(lines)


# Kernel time and the blocking-kernel events apart by more than this: the page says so.
INSTRUMENTS_APART = 0.05
# The events' usual excess over kernel time (the GPU's work around a launch, a few µs) lies
# within this of the study's median excess over all its rows; such rows of several variants
# are one line, and a row further off is named with its variant.
LAUNCH_BAND_US = 1.0
_AROUND_LAUNCH = (
    "the GPU's own work around the launch, which the events count and the kernel does not"
)


def side_clocks(data: StudyData, job: str, size: str) -> str:
    """What a throttle did to each side of a comparison: the SM clock of each timed function's
    samples (the variant, its baseline, any other) in the job that measured ``job`` at
    ``size``, median and minimum. Empty without a samples table or clocks."""
    s = data.table("samples")
    if s is None or "sm_clock_mhz" not in s:
        return ""
    s = s[(s["job"] == job) & (s["size"] == size)].dropna(subset=["sm_clock_mhz"])
    if s.empty:
        return ""
    names = {"variant": job, "baseline": baseline_label(data)}
    funcs = sorted(s["function"].unique(), key=lambda f: (f != "variant", f != "baseline", f))
    parts = []
    for f in funcs:
        c = s.loc[s["function"] == f, "sm_clock_mhz"].astype(float)
        parts.append(f"{esc(names.get(f, f))} {fmt(c.median())} ({fmt(c.min())})")
    return "; each side's SM clock over its samples, median (min) MHz: " + ", ".join(parts)


def _apart_line(g: pd.DataFrame, who: str, why: str) -> str:
    """One line for rows where the events and kernel time differ (``_ev``, ``_kt``, ``_r``):
    the one row's both times, or the excess's range, its share's range and the largest."""
    top = g.iloc[int(g["_r"].abs().to_numpy().argmax())]
    both = f"{fmt(top['_ev'] * 1e3)} µs against {fmt(top['_kt'] * 1e3)} µs of kernel time"
    if len(g) == 1:
        return f"{who} at {top['size']}: CUDA events read {both} ({top['_r'] * 100:+.0f} %): {why}."
    added = (g["_ev"] - g["_kt"]) * 1e3
    most = (
        f"{top['size']}" if g["variant"].nunique() == 1 else f"**{top['variant']}**, {top['size']}"
    )
    return (
        f"{who}: CUDA events read {fmt(added.min())} to {fmt(added.max())} µs more than kernel "
        f"time ({g['_r'].min() * 100:+.0f} to {g['_r'].max() * 100:+.0f} %; most: {most}, "
        f"{both}): {why}."
    )


def instrument_notes(m) -> list[str]:
    """Where a row's two instruments differ by more than INSTRUMENTS_APART (kernel time is the
    headline; the events add the GPU's work around a launch): the rows whose excess is the
    study's usual one (within LAUNCH_BAND_US of its median over every row) in one line, or in
    their variant's line where they are all of one variant; a line per variant for the rest,
    which the launch does not explain; and the rows that fell back to events, with why."""
    out = []
    if "event_median_ms" not in m:
        return out
    ok = m[(m["status"] == "ok") & (m["timing_method"] == "cupti")]
    ev = pd.to_numeric(ok["event_median_ms"], errors="coerce")
    kt = pd.to_numeric(ok["median_ms"], errors="coerce")
    rows = ok.assign(_ev=ev, _kt=kt, _r=ev / kt - 1)
    rows = rows[rows["_kt"] > 0].reset_index(drop=True)
    usual = ((rows["_ev"] - rows["_kt"]) * 1e3).median()
    apart = rows[rows["_r"].abs() > INSTRUMENTS_APART]
    near = ((apart["_ev"] - apart["_kt"]) * 1e3 - usual).abs() <= LAUNCH_BAND_US
    launch = apart[near]
    shared = launch["variant"].nunique() > 1  # the launch's rows of several variants: one line
    if shared:
        who = f"{len(launch)} rows of {launch['variant'].nunique()} variants"
        why = f"{_AROUND_LAUNCH} ({fmt(usual)} µs at the median over all {len(rows)} rows)"
        out.append(_apart_line(launch, who, why))
    off = (
        f"not the launch's work ({fmt(usual)} µs, what the events add to this study's rows at "
        "the median)"
    )
    named = apart[~near] if shared else apart
    for (v, is_near), g in named.groupby(["variant", near[named.index]], sort=False):
        n = f" at {len(g)} sizes" if len(g) > 1 else ""
        out.append(_apart_line(g, f"**{v}**{n}", _AROUND_LAUNCH if is_near else off))
    if "timing_note" in m:
        fell = m[(m["timing_method"] == "events") & m["timing_note"].map(lambda x: not isnull(x))]
        for note, g in fell.groupby("timing_note", sort=False):
            out.append(f"{len(g)} row(s) timed with CUDA events, not kernel time: {esc(note)}.")
    return out


def attention(data: StudyData, stale: list[dict] | None = None) -> list[str]:
    """Everything a reader must not miss: each is one Markdown bullet."""
    out = []
    m = data.measurements
    order = ladder_order(data)
    known = {v["id"] for v in data.meta.get("variants", [])}
    main = main_rows(data)
    for v in order:
        if v in known and v not in set(main["variant"]):
            out.append(f"**{v}** is in the study config but has no measurement.")
    for v in dict.fromkeys(main["variant"]):
        if known and v not in known:
            out.append(f"**{v}** was measured but is not in the study config.")
    for (v, reason), g in main[main["status"] == "skipped"].groupby(
        ["variant", "reason"], sort=False, dropna=False
    ):
        sizes = ", ".join(g["size"])
        out.append(f"**{v}** skipped at {sizes}: {esc(reason) if not isnull(reason) else DASH}")
    for _, r in main[main["status"] == "failed"].iterrows():
        out.append(f"**{r['variant']}** failed at {r['size']}: {esc(r['reason'])}")
    cand = candidate_rows(data)
    if len(cand):
        bad = cand[cand["status"] != "ok"]
        for t, g in bad.groupby("tuned_from", sort=False):
            reasons = sorted({str(x)[:160] for x in g["reason"].dropna()})
            extra = f" (e.g. {esc(reasons[0])})" if reasons else ""
            out.append(
                f"**{t}**: {len(g)} of {len(cand[cand['tuned_from'] == t])} candidate "
                f"measurements did not run or failed{extra}; see the candidates table."
            )
    wrong = m[m["correct"].map(lambda x: not isnull(x) and not bool(x))]
    for _, r in wrong.iterrows():
        out.append(
            f"**{r['variant']}** at {r['size']} is INCORRECT: rel_err {fmt(r['rel_err'])} "
            f"over tolerance {fmt(r['tolerance'])}."
        )
    host_timed = "timing_method" in m and (m["timing_method"] == "host").any()
    if host_timed and distinct(m, "host_cpu"):
        out.append(
            "The host-timed rows (timing: host) are what a call costs its caller, the host's "
            "own work included: where the host's work is the bottleneck (launch overhead), "
            f"they hold for this host's CPU ({esc(distinct(m, 'host_cpu'))}) and move with it."
        )
    thr = m[m["throttled"].map(is_true)]
    for _, r in thr.iterrows():
        out.append(
            f"**{r['variant']}** at {r['size']} was measured while THROTTLED "
            f"({esc(r['throttle_reasons']) or 'reason not recorded'}, SM clock min "
            f"{fmt(r['sm_clock_min_mhz'])} MHz){side_clocks(data, r['variant'], r['size'])}."
        )
    out += instrument_notes(m)
    unconv = m[(m["status"] == "ok") & m["converged"].map(lambda x: not isnull(x) and not x)]
    if len(unconv):
        items = ", ".join(f"{r['variant']} at {r['size']}" for _, r in unconv.head(12).iterrows())
        more = f" and {len(unconv) - 12} more" if len(unconv) > 12 else ""
        out.append(
            f"{len(unconv)} measurement(s) stopped at the sample or time limit before the "
            f"stopping rule (median's relative standard error under target, and the minimum "
            f"GPU time) was met; their rse is in the table: {items}{more}."
        )
    san = data.table("sanitizer")
    if san is not None:
        for _, r in san[san["verdict"] != "clean"].iterrows():
            what = "known finding" if r["verdict"] == "known" else "FINDINGS"
            out.append(
                f"**{r['variant']}** at {r['size']}: compute-sanitizer {r['tool']} {what}: "
                f"{r['errors']} error(s), {r['warnings']} warning(s)"
                + (f"; {esc(r['known_reason'])}" if not isnull(r["known_reason"]) else "")
                + (
                    f"; first: `{inline_code(r['first_finding'])}`"
                    if not isnull(r["first_finding"])
                    else ""
                )
            )
    ran = list(dict.fromkeys(main.loc[main["status"] == "ok", "variant"]))
    for table, tool in (("profile", "Nsight Compute"), ("sanitizer", "compute-sanitizer")):
        t = data.table(table)
        missing = [v for v in ran if t is not None and v not in set(t["variant"])]
        if missing:
            out.append(
                ", ".join(f"**{v}**" for v in missing)
                + f": measured, but no {tool} rows (the {table} job ran nothing for it; its "
                "log says why)."
            )
    for s in stale or []:
        detail = f" ({esc(s['detail'])})" if s.get("detail") else ""
        if s["change"] == ADDED:
            on = distinct(m, "gpu_name") or s.get("gpu") or "this GPU"
            out.append(f"**{s['variant']}** is {ADDED} on {on}{detail}.")
            continue
        out.append(
            f"**{s['variant']}** is stale: {s['change']}{detail}"
            "; the numbers here are those of the sources as measured."
        )
    return out


# The full table's columns: (header, column or function of the row).
def _notes(r) -> str:
    notes = []
    if r["status"] != "ok" and not isnull(r.get("reason")):
        notes.append(esc(r["reason"]))
    if r.get("variant_kind") == "tuned" and not isnull(r.get("tune_point")):
        notes.append("tuned: " + point_label(r["tune_point"]))
    if is_true(r.get("throttled")):
        notes.append(f"THROTTLED ({esc(r.get('throttle_reasons')) or 'reason not recorded'})")
    if r.get("correct") is not None and not isnull(r.get("correct")) and not bool(r["correct"]):
        notes.append("INCORRECT")
    if r["status"] == "ok" and not isnull(r.get("converged")) and not bool(r["converged"]):
        notes.append("not converged (sample/time limit)")
    return "; ".join(notes)


def _bounds(r, col: str) -> str:
    """'[lo, hi]' of a ratio's bootstrap bounds (kernelbook.report.compare.with_intervals)."""
    lo, hi = r.get(f"{col}_lo"), r.get(f"{col}_hi")
    return DASH if isnull(lo) or isnull(hi) else f"[{fmt(lo)}, {fmt(hi)}]"


FULL_COLUMNS: list[tuple[str, object]] = [
    ("variant", "variant"),
    ("size", "size"),
    ("status", "status"),
    ("median ms", "median_ms"),
    ("TFLOP/s", "tflops"),
    ("GB/s", "gbps"),
    ("% of baseline", "pct_of_baseline"),
    ("interval", lambda r: _bounds(r, "pct_of_baseline")),
    ("baseline ms", "baseline_median_ms"),
    ("n", "n_samples"),
    ("rse %", lambda r: r["rse_median"] * 100 if not isnull(r["rse_median"]) else None),
    ("rel err", "rel_err"),
    ("SM MHz min", "sm_clock_min_mhz"),
    ("notes", _notes),
]


def table_rows(df: pd.DataFrame) -> list[list[str]]:
    rows = []
    for _, r in df.iterrows():
        cells = []
        for header, col in FULL_COLUMNS:
            val = col(r) if callable(col) else r.get(col)
            if header in ("variant", "size", "status", "notes", "interval"):
                cells.append(esc(val) if val is not None else "")
            elif header == "n":
                cells.append(DASH if isnull(val) else str(int(val)))
            else:
                cells.append(fmt(val))
        rows.append(cells)
    return rows


def full_table(data: StudyData, df: pd.DataFrame) -> str:
    heads = [h if h != "% of baseline" else f"% of {baseline_label(data)}" for h, _ in FULL_COLUMNS]
    return md_table(heads, table_rows(df), "lll" + "r" * (len(heads) - 4) + "l")


def sorted_rows(data: StudyData, df: pd.DataFrame) -> pd.DataFrame:
    order = {v: i for i, v in enumerate(ladder_order(data))}
    sizes = {s: i for i, s in enumerate(sizes_by_flop(data.measurements))}
    key = df.assign(
        _v=df["variant"].map(order).fillna(len(order)),
        _t=df["tuned_from"].map(order).fillna(len(order)) if "tuned_from" in df else 0,
        _s=df["size"].map(sizes),
    )
    return key.sort_values(["_t", "_v", "variant", "_s"], kind="stable").drop(
        columns=["_v", "_t", "_s"]
    )

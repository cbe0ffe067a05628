"""The study's targets (config ``targets``) held against its measurements: met or missed, and
for a missed one what Nsight Compute saw of the variant that came closest, at that size."""

from __future__ import annotations

import re

import pandas as pd

from kernelbook import tables
from kernelbook.report.data import StudyData, baseline_label, copy_word, main_rows
from kernelbook.report.markdown import DASH, as_float, esc, fmt, md_table
from kernelbook.report.quality import SPREAD_BOUND_PCT

# What a page quotes of a profile: how busy the issue slots, the pipes and DRAM were
BUSY = (
    ("issue slots", "sm__issue_active.avg.pct_of_peak_sustained_elapsed"),
    ("tensor pipe", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    ("FMA pipe", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    ("ALU pipe", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    ("XU pipe (MUFU)", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed"),
    ("LSU pipe", "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed"),
    ("DRAM", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
)
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")
# a warp that issued, or was ready and not picked, is not waiting on anything
NOT_A_WAIT = {"selected", "not_selected"}


def metric_label(metric: str, base: str, copy: str = "copy") -> str:
    """How the page names a target's metric (``copy``: the same-bytes reference, copy or
    read)."""
    if metric == "pct_of_baseline":
        return f"% of {base}"
    if metric == "pct_of_copy":
        return f"% of {copy}"
    if metric.startswith("pct_of_"):
        return f"% of {metric[len('pct_of_') :]}"
    return {"tflops": "TFLOP/s", "gbps": "GB/s"}.get(metric, metric)


def evaluate(data: StudyData) -> list[dict]:
    """Each target with the variant held against it, its measured value, the verdict (met,
    missed, or not measured) and how the page names it (``what``)."""
    rows = tables.extra_baseline_columns(main_rows(data))
    base, word = baseline_label(data), copy_word(main_rows(data))
    out = []
    for t in data.meta.get("targets") or []:
        at = rows[(rows["size"] == t["size"]) & (rows["status"] == "ok")]
        if t.get("variant"):
            at = at[at["variant"] == t["variant"]]
        metric = t["metric"]
        vals = pd.to_numeric(at[metric], errors="coerce") if metric in at else pd.Series()
        what = f"{metric_label(metric, base, word)} >= {fmt(t['min'])} at {t['size']}"
        got = {**t, "what": what, "value": None, "held": None, "verdict": "not measured"}
        if vals.notna().any():
            i = vals.idxmax()
            got.update(value=float(vals[i]), held=at.loc[i, "variant"])
            got["verdict"] = "met" if got["value"] >= float(t["min"]) else "missed"
            # met by less than a baseline may move between jobs: another run may miss it
            got["narrow"] = got["verdict"] == "met" and got["value"] < float(t["min"]) * (
                1 + SPREAD_BOUND_PCT / 100
            )
        elif t.get("variant"):
            got["held"] = t["variant"]
        out.append(got)
    return out


def profile_digest(data: StudyData, variant: str, size: str) -> str | None:
    """What ncu saw of ``variant`` at ``size``: its launch's blocks and waves, how busy the
    issue slots, pipes and DRAM were, and its largest stall reasons (warps an issue); None
    where it was not profiled there."""
    prof = data.table("profile")
    if prof is None or prof.empty:
        return None
    sub = prof[(prof["variant"] == variant) & (prof["size"] == size)]
    if sub.empty:
        return None
    val = dict(zip(sub["metric"], pd.to_numeric(sub["value"], errors="coerce"), strict=False))
    busy = [f"{name} {fmt(val[m], 3)} %" for name, m in BUSY if as_float(val.get(m)) is not None]
    stalls = {
        STALL.match(m)[1]: v
        for m, v in val.items()
        if STALL.match(m) and STALL.match(m)[1] not in NOT_A_WAIT and as_float(v)
    }
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:4]
    parts = []
    launch = launch_text(val)
    if launch:
        parts.append(launch)
    if busy:
        parts.append("busy: " + ", ".join(busy))
    if top:
        parts.append(
            "largest stalls (warps an issue): "
            + ", ".join(f"{k.replace('_', ' ')} {fmt(v, 3)}" for k, v in top)
        )
    return "; ".join(parts) if parts else None


def launch_text(val: dict) -> str | None:
    """The launch's shape as ncu saw it: blocks, blocks resident an SM (the tightest of its
    occupancy limits), and waves, with how full the last one is where it is partial (a grid of
    3.88 waves leaves 12 % of the resident slots idle for the last one); None without them."""
    blocks = as_float(val.get("launch__grid_size"))
    waves = as_float(val.get("launch__waves_per_multiprocessor"))
    if not blocks or waves is None:
        return None
    limits = [as_float(v) for m, v in val.items() if m.startswith("launch__occupancy_limit_")]
    limits = [x for x in limits if x]
    text = f"launch: {fmt(blocks)} blocks"
    if limits:
        text += f", {fmt(min(limits))} resident an SM"
    text += f", {fmt(waves, 3)} waves"
    last = waves - int(waves)
    if waves > 1 and 1e-3 < last < 0.999:
        text += f" (the last {fmt(100 * last, 2)} % full)"
    return text


def ncu_rate_text(data: StudyData, t: dict) -> str:
    """For a TFLOP/s or GB/s target: the rate Nsight Compute's kernel time gives at the
    target's size (the same work over gpu__time_duration), a second reading of the number."""
    if t["metric"] not in ("tflops", "gbps") or t["value"] is None:
        return ""
    prof, meas = data.table("profile"), main_rows(data)
    if prof is None or prof.empty:
        return ""
    ns = prof[
        (prof["variant"] == t["held"])
        & (prof["size"] == t["size"])
        & (prof["metric"] == "gpu__time_duration.sum")
    ]["value"]
    row = meas[(meas["variant"] == t["held"]) & (meas["size"] == t["size"])]
    if ns.empty or row.empty or not as_float(ns.iloc[-1]):
        return ""
    ms = float(ns.iloc[-1]) / 1e6
    rate = t["value"] * float(row.iloc[-1]["median_ms"]) / ms
    unit = "TFLOP/s" if t["metric"] == "tflops" else "GB/s"
    return (
        f" Nsight Compute's kernel time there, {fmt(ms * 1000)} us (one launch, profiled), "
        f"gives {fmt(rate)} {unit}."
    )


def section_lines(data: StudyData, found: list[dict]) -> list[str]:
    """The page's "Targets" section (``found``: evaluate's): a table of every target, then
    what the profile shows where one is missed."""
    if not found:
        return []
    base, word = baseline_label(data), copy_word(main_rows(data))
    rows = []
    for t in found:
        rows.append(
            [
                t["size"],
                metric_label(t["metric"], base, word),
                f">= {fmt(t['min'])}",
                t["held"] or DASH,
                fmt(t["value"]) if t["value"] is not None else DASH,
                f"**{t['verdict']}**"
                if t["verdict"] != "met"
                else ("met, narrowly" if t.get("narrow") else "met"),
                esc(t.get("says") or ""),
            ]
        )
    L = ["## Targets", ""]
    L.append(
        "What the study set out to reach (the config's `targets`), each held against the best "
        "variant at its size unless it names one."
    )
    L.append("")
    L.append(
        md_table(
            ["size", "metric", "target", "variant", "measured", "verdict", "from"],
            rows,
            "llrlrll",
        )
    )
    L.append("")
    for t in found:
        if t.get("narrow"):
            over = 100 * (t["value"] / float(t["min"]) - 1)
            L += [
                f"**Met narrowly: {t['what']}.** {t['held']} reaches {fmt(t['value'])}, "
                f"{fmt(over, 2)} % over: "
                f"less than the {SPREAD_BOUND_PCT:g} % a baseline may move between the jobs of "
                "a run, so a run of its own may fall on either side." + ncu_rate_text(data, t),
                "",
            ]
    shown = set()
    for t in found:
        if t["verdict"] != "missed":
            continue
        short = fmt(t["min"] - t["value"])
        line = (
            f"**Missed: {t['what']}.** The closest, {t['held']}, reaches {fmt(t['value'])} "
            f"({short} short)."
        )
        digest = profile_digest(data, t["held"], t["size"])
        if (t["held"], t["size"]) in shown:
            line += " Its profile there is above."
        elif digest:
            line += f" Nsight Compute at that size: {digest}."
        else:
            line += f" {t['held']} was not profiled at {t['size']}."
        shown.add((t["held"], t["size"]))
        L += [line, ""]
    return L


def notes(found: list[dict]) -> list[str]:
    """One "read this first" line for each target missed, not measured or met narrowly
    (``found``: evaluate's)."""
    out = []
    for t in found:
        if t["verdict"] == "met" and not t.get("narrow"):
            continue
        verdict = "met **narrowly**" if t["verdict"] == "met" else f"**{t['verdict']}**"
        held = f" ({t['held']}: {fmt(t['value'])})" if t["value"] is not None else ""
        out.append(f"Target {verdict}: {t['what']}{held}; see Targets.")
    return out

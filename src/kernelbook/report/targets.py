"""The study's targets (config ``targets``) held against its measurements: met or missed, and
for a missed one what Nsight Compute saw of the variant that came closest, at that size."""

from __future__ import annotations

import math
import re

import pandas as pd

from kernelbook import tables
from kernelbook.report.data import (
    StudyData,
    baseline_label,
    copy_word,
    main_rows,
    profiled_baselines,
)
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
        if "max_drop" in t:
            out.append(evaluate_drop(data, rows, t, metric_label(t["metric"], base, word)))
            continue
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


def short(t: dict) -> str:
    """A target in a few words, as the index names one not met."""
    if "max_drop" in t:
        return f"{t['metric']} drop <= {fmt(t['max_drop'])} at {', '.join(t['sizes'])}"
    return f"{t['metric']} >= {fmt(t['min'])} at {t['size']}"


def evaluate_drop(data: StudyData, rows: pd.DataFrame, t: dict, label: str) -> dict:
    """A ``max_drop`` target: each step (a variant of the config, its tuned winner for a tuned
    one) at each of ``sizes`` against its own value at ``against``. A drop over ``max_drop`` is
    explained by the config's ``why`` for the step, or by its grid's waves (below); met when
    every larger drop is explained. ``drops`` lists the larger ones; ``value`` and ``held`` the
    largest unexplained one (value 0 where every one is explained)."""
    unit = " points" if t["metric"].startswith("pct_of_") else ""
    sizes = ", ".join(t["sizes"])
    what = (
        f"no step loses more than {fmt(t['max_drop'])}{unit} of {label} at {sizes} "
        f"against {t['against']}"
    )
    got = {**t, "what": what, "value": None, "held": None, "verdict": "not measured", "drops": []}
    got["unit"] = unit
    steps = [v["id"] for v in data.meta.get("variants", [])]
    ok = rows[(rows["status"] == "ok") & rows["variant"].isin(steps)]
    value = pd.to_numeric(ok[t["metric"]], errors="coerce") if t["metric"] in ok else None
    if value is None:
        return got
    ok = ok.assign(_v=value).dropna(subset=["_v"])
    ref = ok[ok["size"] == t["against"]].drop_duplicates("variant").set_index("variant")
    compared = 0
    for size in t["sizes"]:
        here = ok[ok["size"] == size].drop_duplicates("variant").set_index("variant")
        for v in [v for v in steps if v in ref.index and v in here.index]:
            compared += 1
            drop = float(ref.at[v, "_v"] - here.at[v, "_v"])
            if drop <= t["max_drop"]:
                continue
            d = {"variant": v, "size": size, "at_against": float(ref.at[v, "_v"])}
            d.update(value=float(here.at[v, "_v"]), drop=drop, why=t["why"].get(v))
            waves = waves_cost(data, v, ref.loc[v], here.loc[v])
            d["waves"] = waves
            covered = waves is not None and waves["cost"] >= drop / d["at_against"]
            d["explained"] = "config" if d["why"] else ("waves" if covered else None)
            got["drops"].append(d)
    if not compared:
        return got
    open_ = [d for d in got["drops"] if not d["explained"]]
    got["unexplained"] = len(open_)
    worst = max(open_, key=lambda d: d["drop"], default=None)
    if worst:
        got.update(value=worst["drop"], held=f"{worst['variant']} at {worst['size']}")
    else:
        got["value"] = 0.0
    got["verdict"] = "missed" if open_ else "met"
    return got


def _dims(text) -> int | None:
    try:
        n = 1
        for x in str(text).split(","):
            n *= int(float(x))
        return n
    except ValueError:
        return None


def waves_cost(data: StudyData, variant: str, ref: pd.Series, here: pd.Series):
    """How many waves the variant's grid fills at ``here``'s size and at ``ref``'s, with as
    many blocks resident an SM as Nsight Compute found (the tightest of its occupancy limits,
    where the variant was profiled with the same block and dynamic shared memory, and, for a
    tuned variant, the same winner), and what the last, partial wave can cost: 1 - (waves /
    whole waves here) / (the same at ``ref``'s). None where any of it is not known."""
    prof = data.table("profile")
    if prof is None or prof.empty or "grid" not in here or "block" not in here:
        return None
    for col in ("block", "smem_dynamic_bytes", "tuned_from"):
        if col in here and str(here.get(col)) != str(ref.get(col)):
            return None  # another kernel there than the one profiled
    sub = prof[prof["variant"] == variant]
    val = dict(zip(sub["metric"], pd.to_numeric(sub["value"], errors="coerce"), strict=False))
    limits = [as_float(x) for m, x in val.items() if m.startswith("launch__occupancy_limit_")]
    limits = [x for x in limits if x]
    sms = as_float(val.get("launch__sm_count"))
    block = as_float(val.get("launch__block_size"))
    if not limits or not sms or block != _dims(here["block"]):
        return None
    resident = min(limits)
    blocks = {"here": _dims(here["grid"]), "against": _dims(ref["grid"])}
    if None in blocks.values():
        return None
    waves = {k: b / (sms * resident) for k, b in blocks.items()}
    fill = {k: w / math.ceil(w) for k, w in waves.items()}
    return {
        "blocks": blocks["here"],
        "resident": resident,
        "sms": sms,
        "waves": waves["here"],
        "waves_against": waves["against"],
        "cost": max(0.0, 1 - fill["here"] / fill["against"]),
    }


def last_wave(waves: float) -> str:
    """'the last 88 % full' for a grid of 3.88 waves; '' for whole waves or less than one."""
    last = waves - int(waves)
    if waves > 1 and 1e-3 < last < 0.999:
        return f"the last {fmt(100 * last, 2)} % full"
    return ""


def waves_text(w: dict, against: str) -> str:
    def one(waves):
        last = last_wave(waves)
        return f"{fmt(waves, 3)} waves" + (f", {last}" if last else "")

    return (
        f"{fmt(w['blocks'])} blocks, {fmt(w['resident'])} resident an SM on {fmt(w['sms'])} "
        f"SMs: {one(w['waves'])} ({against}: {one(w['waves_against'])}); the partial wave can "
        f"cost up to {fmt(100 * w['cost'], 2)} %"
    )


def drop_cell(t: dict) -> str:
    """A ``max_drop`` target's "measured" cell: the largest unexplained drop, or how many
    steps lose more than it allows, all explained."""
    if t["value"] is None:
        return DASH
    n = len(t["drops"])
    if t["unexplained"]:
        return f"{fmt(t['value'])} ({t['unexplained']} of {n} unexplained)"
    return f"{n} over, all explained" if n else "none over"


def drop_lines(t: dict) -> list[str]:
    """The steps of a ``max_drop`` target that lose more than it allows, each with why."""
    if not t["drops"]:
        return []
    L = [
        f"**Steps that lose more than {fmt(t['max_drop'])}{t['unit']} at {', '.join(t['sizes'])}** "
        f"against {t['against']}, and why:",
        "",
    ]
    rows = []
    for d in t["drops"]:
        if d["explained"] == "config":
            why = esc(d["why"])
            if d["waves"]:
                why += f" ({waves_text(d['waves'], t['against'])})"
        elif d["explained"] == "waves":
            why = f"the grid's waves: {waves_text(d['waves'], t['against'])}"
        else:
            why = "**not explained**" + (
                f": {waves_text(d['waves'], t['against'])}, less than the drop"
                if d["waves"]
                else " (no profile of the same launch to count its waves)"
            )
        rows.append(
            [
                d["variant"], d["size"], fmt(d["at_against"]), fmt(d["value"]),
                fmt(d["drop"]), why,
            ]
        )  # fmt: skip
    L.append(
        md_table(["step", "size", f"at {t['against']}", "here", "drop", "why"], rows, "llrrrl")
    )
    return [*L, ""]


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
    if last_wave(waves):
        text += f" ({last_wave(waves)})"
    return text


def ncu_rate_text(data: StudyData, t: dict) -> str:
    """For a TFLOP/s or GB/s target: the rate Nsight Compute's kernel time gives at the
    target's size (the same work over gpu__time_duration), a second reading of the number."""
    if "max_drop" in t or t["metric"] not in ("tflops", "gbps") or t["value"] is None:
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
        drop = "max_drop" in t
        rows.append(
            [
                ", ".join(t["sizes"]) + f" against {t['against']}" if drop else t["size"],
                metric_label(t["metric"], base, word) + (" lost" if drop else ""),
                f"<= {fmt(t['max_drop'])} unexplained" if drop else f">= {fmt(t['min'])}",
                t["held"] or DASH,
                drop_cell(t) if drop else fmt(t["value"]) if t["value"] is not None else DASH,
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
    for t in found:
        if "max_drop" in t:
            L += drop_lines(t)
    shown = set()
    for t in found:
        if t["verdict"] != "missed" or "max_drop" in t:
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
            line += baseline_digest(data, t["size"], t["metric"])
        else:
            line += f" {t['held']} was not profiled at {t['size']}."
        shown.add((t["held"], t["size"]))
        L += [line, ""]
    return L


def baseline_digest(data: StudyData, size: str, metric: str = "pct_of_baseline") -> str:
    """The profile at ``size`` of the baseline a target on ``metric`` is held against (the
    one ``pct_of_<name>`` names, else the study's primary), profiled with the variants (its
    rows: data.profiled_baselines), as a sentence; where its profile failed there, why;
    nothing where that baseline was not profiled (tables from before baselines were, or
    before the targets' own were)."""
    prof = data.table("profile_status")
    if prof is None:
        prof = data.table("profile")  # a table from before the status column
    if prof is None or prof.empty:
        return ""
    named = metric[len("pct_of_") :] if metric.startswith("pct_of_") else "baseline"
    held = str(data.meta.get("baseline")) if named == "baseline" else named
    out = ""
    for vid, name in profiled_baselines(prof):
        if name != held:
            continue
        digest = profile_digest(data, vid, size)
        if digest:
            out += f" The baseline ({name}) there, profiled in the same run: {digest}."
            continue
        failed = prof[(prof["variant"] == vid) & (prof["size"] == size)]
        if not failed.empty:
            out += f" The baseline ({name}) was not profiled there: {failed['reason'].iloc[0]}."
    return out


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

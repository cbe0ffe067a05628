"""The throughput charts of a study, drawn from its tables and never from hand-typed numbers:
the ladder, the sweeps over sizes, and the rooflines.

Each function takes table rows (pandas frames as read from the Parquet files) and plain
arguments, draws one figure and writes it as PNG and SVG through kernelbook.report.plot.save.
A function raises NoData when the rows lack what its figure needs; the worklog then names the
figure it skipped and why. Which rows to pass (headline size, ladder order) is decided by
kernelbook.report.worklog.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kernelbook import tables
from kernelbook.report.plot import BASELINE_COLOR, Figure, NoData, num, palette, save

# ------------------------------------------------------------------------------------------
# (a) the ladder


# reference lines of a study's further baselines (``baseline: [first, others...]``)
EXTRA_COLORS = ["darkorange", "purple", "teal", "saddlebrown"]


def _extra_levels(headline: pd.DataFrame) -> dict[str, float]:
    """Each further baseline's throughput in % of the first, from the rows that timed both:
    100 x first median / its median (= pct_of_baseline / its pct x 100), median over rows."""
    wide = tables.extra_baseline_columns(headline)
    out = {}
    for name in tables.extra_baseline_names(headline):
        ratio = (wide["pct_of_baseline"] / wide[f"pct_of_{name}"].astype(float) * 100).dropna()
        if len(ratio):
            out[name] = float(ratio.median())
    return out


def ladder(
    headline: pd.DataFrame,
    order: list[str],
    outdir,
    *,
    size_label: str,
    baseline_label: str,
    references: list[dict] = (),
    name: str = "ladder",
) -> Figure:
    """% of baseline per variant at the headline size, published references beside
    (``name``: the figure's file name, for a ladder at a second headline size).

    ``headline`` has one row per variant (index: variant id) with status and
    pct_of_baseline; variants absent or not ok are drawn as labelled gaps.
    """
    if headline.empty or headline["pct_of_baseline"].notna().sum() == 0:
        raise NoData(f"no variant has a % of {baseline_label} at {size_label}")
    refs = [r for r in references if r.get("metric", "pct_of_baseline") == "pct_of_baseline"]
    colors = palette(order)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(order) + 2.5), 4.6))
    x = np.arange(len(order))
    width = 0.7 if not refs else 0.55
    top = 100.0
    for i, v in enumerate(order):
        row = headline.loc[v] if v in headline.index else None
        pct = num(row["pct_of_baseline"]) if row is not None else math.nan
        if math.isnan(pct):
            why = "not measured" if row is None else str(row.get("status") or "no value")
            ax.text(i, 1, why, rotation=90, ha="center", va="bottom", color="firebrick", fontsize=8)
            continue
        ax.bar(i, pct, width=width, color=colors[v], edgecolor="black", linewidth=0.5)
        ax.text(i, pct, f"{pct:.1f}", ha="center", va="bottom", fontsize=8)
        top = max(top, pct)
    markers = ["D", "v", "P", "X", "*"]
    for j, ref in enumerate(refs):
        vals = ref.get("values", {})
        xs = [i + width / 2 + 0.08 for i, v in enumerate(order) if v in vals]
        ys = [float(vals[v]) for v in order if v in vals]
        if xs:
            ax.scatter(
                xs,
                ys,
                marker=markers[j % len(markers)],
                s=36,
                color="dimgray",
                edgecolor="black",
                zorder=5,
                label=ref.get("label", f"reference {j + 1}"),
            )
            top = max(top, max(ys))
    ax.axhline(100, color=BASELINE_COLOR, linewidth=1.2, linestyle="--", label=baseline_label)
    for j, (other, level) in enumerate(_extra_levels(headline).items()):
        ax.axhline(
            level,
            color=EXTRA_COLORS[j % len(EXTRA_COLORS)],
            linewidth=1.2,
            linestyle=":",
            label=f"{other} ({level:.0f} % of {baseline_label})",
        )
        top = max(top, level)
    ax.set_xticks(x, order, rotation=30, ha="right")
    ax.set_ylim(0, top * 1.3)
    ax.set_ylabel(f"% of {baseline_label} (higher is better)")
    ax.set_title(f"The ladder at {size_label}")
    ax.legend(loc="upper left", fontsize=8, frameon=True)
    caption = (
        f"Each variant's throughput as a percentage of {baseline_label}, timed side by side in "
        f"the same job at {size_label}."
    )
    if refs:
        caption += " Grey markers: published numbers from other GPUs, for orientation."
    title = f"% of {baseline_label} per variant" + ("" if name == "ladder" else f" at {size_label}")
    return save(fig, outdir, name, title, caption)


# ------------------------------------------------------------------------------------------
# (b) the sweep


def sweep(
    rows: pd.DataFrame,
    order: list[str],
    outdir,
    *,
    metric: str = "tflops",
    baseline_label: str = "baseline",
) -> Figure:
    """Throughput against problem size (ordered by FLOPs), a line per variant."""
    ok = rows[(rows["status"] == "ok") & rows[metric].notna()]
    if ok.empty:
        raise NoData(f"no measured {metric} values")
    keys = ["flop", "bytes_min"] if "bytes_min" in rows else ["flop"]
    sizes = (
        rows[["size", *keys]]
        .drop_duplicates("size")
        .sort_values([*keys, "size"], kind="stable")["size"]
        .tolist()
    )
    pos = {s: i for i, s in enumerate(sizes)}
    unit = "TFLOP/s" if metric == "tflops" else "GB/s"
    colors = palette(order)
    fig, ax = plt.subplots(figsize=(max(6.5, 0.9 * len(sizes) + 2), 4.8))
    for v in order:
        sub = ok[ok["variant"] == v]
        if sub.empty:
            continue
        sub = sub.assign(_x=sub["size"].map(pos)).sort_values("_x", kind="stable")
        ax.plot(sub["_x"], sub[metric], marker="o", markersize=4, color=colors[v], label=v)
    base_col = f"baseline_{metric}"
    if base_col in ok:
        base = ok.groupby("size")[base_col].median().dropna()
        if len(base):
            bx = [pos[s] for s in base.index]
            idx = np.argsort(bx)
            ax.plot(
                np.array(bx)[idx],
                base.to_numpy()[idx],
                color=BASELINE_COLOR,
                linewidth=3,
                marker="s",
                label=f"{baseline_label} (baseline)",
            )
    wide = tables.extra_baseline_columns(ok)
    for j, name in enumerate(tables.extra_baseline_names(ok)):
        extra = wide.groupby("size")[f"{name}_{metric}"].median().dropna()
        if len(extra):
            bx = [pos[s] for s in extra.index]
            idx = np.argsort(bx)
            ax.plot(
                np.array(bx)[idx],
                extra.to_numpy()[idx],
                color=EXTRA_COLORS[j % len(EXTRA_COLORS)],
                linewidth=2.5,
                linestyle=":",
                marker="^",
                label=f"{name} (baseline)",
            )
    ax.set_xticks(range(len(sizes)), sizes, rotation=35, ha="right")
    ax.set_yscale("log")
    ax.set_xlabel("problem size (ordered by FLOPs, then bytes)")
    ax.set_ylabel(f"{unit} (log scale)")
    ax.set_title(f"{unit} against problem size")
    ax.legend(fontsize=7, ncol=2 if len(order) > 6 else 1, loc="best")
    caption = (
        f"Median {unit} of every variant at every size; the bold black line is {baseline_label} "
        "timed beside them (median over the variants' jobs). Gaps are sizes a variant skipped."
    )
    return save(fig, outdir, "sweep", f"{unit} against problem size", caption)


def sweep_facets(
    rows: pd.DataFrame,
    order: list[str],
    outdir,
    *,
    x: str,
    by: tuple[str, ...],
    metric: str = "tflops",
    baseline_label: str = "baseline",
) -> Figure:
    """Throughput against one size name ``x``, a panel per value of the size names ``by``
    (attention: against S, a panel per D and causal), every baseline drawn in each."""
    ok = rows[(rows["status"] == "ok") & rows[metric].notna()]
    if ok.empty:
        raise NoData(f"no measured {metric} values")
    missing = [c for c in (x, *by) if c not in ok.columns]
    if missing:
        raise NoData(f"no size column(s) {', '.join(missing)} in the measurements")
    wide = tables.extra_baseline_columns(ok)
    extras = tables.extra_baseline_names(ok)
    keys = sorted(ok[list(by)].drop_duplicates().itertuples(index=False, name=None))
    unit = "TFLOP/s" if metric == "tflops" else "GB/s"
    colors = palette(order)
    fig, axes = plt.subplots(
        1, len(keys), figsize=(4.2 * len(keys) + 1, 4.4), sharey=True, squeeze=False
    )
    lines = [(v, metric, {"color": colors[v], "marker": "o", "markersize": 4}) for v in order]
    for ax, key in zip(axes[0], keys, strict=True):
        sel = wide
        for c, val in zip(by, key, strict=True):
            sel = sel[sel[c] == val]
        for v, col, style in lines:
            sub = sel[sel["variant"] == v].groupby(x)[col].median()
            if len(sub):
                ax.plot(sub.index, sub.to_numpy(), label=v, **style)
        base = sel.groupby(x)[f"baseline_{metric}"].median().dropna()
        if len(base):
            ax.plot(base.index, base.to_numpy(), color=BASELINE_COLOR, linewidth=3, marker="s",
                    label=f"{baseline_label} (baseline)")  # fmt: skip
        for j, name in enumerate(extras):
            e = sel.groupby(x)[f"{name}_{metric}"].median().dropna()
            if len(e):
                style = {"linewidth": 2.5, "linestyle": ":", "marker": "^"}
                color = EXTRA_COLORS[j % len(EXTRA_COLORS)]
                ax.plot(e.index, e.to_numpy(), color=color, label=f"{name} (baseline)", **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_title(", ".join(f"{c}={val}" for c, val in zip(by, key, strict=True)))
    axes[0][0].set_ylabel(f"{unit} (log scale)")
    axes[0][-1].legend(fontsize=7, loc="best")
    caption = (
        f"Median {unit} against {x}, a panel per {', '.join(by)}; bold black: {baseline_label}"
        + (f", dotted: {', '.join(extras)}" if extras else "")
        + ", each timed beside the variants (median over their jobs)."
    )
    return save(fig, outdir, "sweep_facets", f"{unit} against {x} per {', '.join(by)}", caption)


# ------------------------------------------------------------------------------------------
# (c) the hierarchical roofline


def ceilings(device: pd.DataFrame | None) -> dict[str, float]:
    """Ceilings from the device table: measured ones where there are, else theoretical."""
    vals = tables.device_values(device)
    out = {}
    for key in (
        "fp32_peak_tflops",
        "cublas_fp32_tflops",
        "bf16_tensor_peak_tflops",
        "cublas_bf16_tflops",
        "copy_gbps",
        "dram_peak_gbps",
        "l2_gbps",
        "l1_gbps",
    ):
        if key in vals:
            out[key] = vals[key]
    return out


def roofline(
    roof: pd.DataFrame,
    order: list[str],
    outdir,
    *,
    ceil: dict[str, float],
    size_label: str,
    peak_kind: str = "fp32",
) -> Figure:
    """Each variant at its DRAM, L2 and L1 arithmetic intensity under the device's ceilings;
    the compute roof is the FP32 peak, or with ``peak_kind`` "bf16_tensor" the dense BF16
    tensor peak (and cuBLAS BF16 beside it)."""
    if roof is None or roof.empty:
        raise NoData("no roofline rows")
    if "flop" in roof and (roof["flop"].fillna(0) == 0).all():
        # no arithmetic at all (a transpose, a copy): intensity is 0 at every level, so the
        # roofline reduces to its bandwidth roofs, and no compute peak is needed
        return bandwidth_roofline(roof, order, outdir, ceil=ceil, size_label=size_label)
    prec = "bf16" if peak_kind == "bf16_tensor" else "fp32"
    peak_key = "bf16_tensor_peak_tflops" if prec == "bf16" else "fp32_peak_tflops"
    cublas_key, peak_name = f"cublas_{prec}_tflops", ("BF16 tensor" if prec == "bf16" else "FP32")
    peak = ceil.get(peak_key) or ceil.get(cublas_key)
    dram = ceil.get("copy_gbps") or ceil.get("dram_peak_gbps")
    if not peak or not dram:
        raise NoData("the device table has no compute peak or DRAM bandwidth ceiling")
    levels = [("ai_dram", "DRAM", "o"), ("ai_l2", "L2", "s"), ("ai_l1", "L1", "^")]
    pts = roof[roof["tflops"].notna() & (roof["tflops"] > 0)]
    if pts.empty or not any(pts[c].notna().any() for c, _, _ in levels):
        raise NoData("no roofline row has both an intensity and a FLOP rate")
    colors = palette(order)
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    ais = [float(a) for c, _, _ in levels for a in pts[c].dropna() if a > 0]
    bws = [
        (name, ceil[key], style)
        for key, name, style in (
            ("copy_gbps" if "copy_gbps" in ceil else "dram_peak_gbps", "DRAM", "-"),
            ("l2_gbps", "L2", "--"),
            ("l1_gbps", "L1", ":"),
        )
        if key in ceil
    ]
    ridges = [peak * 1000.0 / bw for _, bw, _ in bws]
    lo = min([*ais, *ridges]) / 4
    hi = max([*ais, *ridges]) * 4
    xs = np.logspace(math.log10(lo), math.log10(hi), 200)
    ceiling_handles = []
    for (name, bw, ls), ridge in zip(bws, ridges, strict=True):
        (line,) = ax.plot(
            xs, np.minimum(xs * bw / 1000.0, peak), color="gray", linestyle=ls, linewidth=1.3
        )
        line.set_label(f"{name} {bw:,.0f} GB/s, ridge {ridge:.3g} FLOP/B")
        ceiling_handles.append(line)
        ax.plot([ridge], [peak], marker="o", markersize=5, color="gray")
        ax.axvline(ridge, color="lightgray", linestyle=ls, linewidth=0.8, zorder=0)
    ax.axhline(peak, color="gray", linewidth=1.3)
    ax.text(
        lo * 1.1, peak * 1.05, f"{peak_name} peak {peak:.3g} TFLOP/s", fontsize=7, color="dimgray"
    )
    if cublas_key in ceil and ceil[cublas_key] != peak:
        c = ceil[cublas_key]
        ax.axhline(c, color=BASELINE_COLOR, linewidth=1, linestyle="-.")
        ax.text(lo * 1.1, c * 0.85, f"cuBLAS {prec.upper()} {c:.3g} TFLOP/s", fontsize=7)
    for v in order:
        sub = pts[pts["variant"] == v]
        if sub.empty:
            continue
        r = sub.iloc[0]
        line_x, line_y = [], []
        for col, _name, marker in levels:
            ai = num(r[col])
            if math.isnan(ai) or ai <= 0:
                continue
            ax.scatter(ai, r["tflops"], marker=marker, s=46, color=colors[v], edgecolor="black")
            line_x.append(ai)
            line_y.append(float(r["tflops"]))
        if line_x:
            ax.plot(line_x, line_y, color=colors[v], linewidth=0.8, alpha=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved at that level)")
    ax.set_ylabel(
        "TFLOP/s (model FLOPs over ncu time)"
        if prec == "bf16"
        else "TFLOP/s (ncu counted FLOPs over ncu time)"
    )
    ax.set_title(f"Hierarchical roofline at {size_label}")
    handles = [
        plt.Line2D([], [], marker="o", linestyle="", color=colors[v], label=v)
        for v in order
        if v in set(pts["variant"])
    ]
    handles += [
        plt.Line2D([], [], marker=m, linestyle="", color="gray", markeredgecolor="black", label=n)
        for _, n, m in levels
    ]
    ax.legend(
        handles=handles + ceiling_handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1)
    )
    caption = (
        "Each variant appears three times, at its DRAM (circle), L2 (square) and L1 (triangle) "
        "intensity; ceilings come from the device table (measured copy bandwidth and cuBLAS "
        "where available). A point far below every roof is latency- or issue-bound."
    )
    return save(fig, outdir, "roofline", "Hierarchical roofline", caption)


def bandwidth_roofline(
    roof: pd.DataFrame,
    order: list[str],
    outdir,
    *,
    ceil: dict[str, float],
    size_label: str,
) -> Figure:
    """The roofline of kernels that do no arithmetic: each variant's achieved bandwidth at
    DRAM, L2 and L1 (ncu bytes over ncu time) against that level's measured ceiling."""
    levels = [
        ("dram_gbps", "DRAM", "copy_gbps" if "copy_gbps" in ceil else "dram_peak_gbps"),
        ("l2_gbps", "L2", "l2_gbps"),
        ("l1_gbps", "L1", "l1_gbps"),
    ]
    levels = [lv for lv in levels if lv[0] in roof and roof[lv[0]].notna().any()]
    if not levels:
        raise NoData("no roofline row has a FLOP rate or a bandwidth")
    variants = [v for v in order if v in set(roof["variant"])]
    colors = palette(order)
    fig, axes = plt.subplots(
        1, len(levels), figsize=(3.2 * len(levels) + 1.5, 0.42 * len(variants) + 1.6), sharey=True
    )
    axes = np.atleast_1d(axes)
    y = np.arange(len(variants))
    for ax, (col, name, key) in zip(axes, levels, strict=True):
        vals = [num(roof.loc[roof["variant"] == v, col].iloc[0]) for v in variants]
        ax.barh(y, [0 if math.isnan(x) else x for x in vals], color=[colors[v] for v in variants])
        roof_bw = ceil.get(key)
        if roof_bw:
            ax.axvline(roof_bw, color="gray", linestyle="--", linewidth=1.2)
            ax.text(roof_bw, -0.7, f"{roof_bw:,.0f}", fontsize=7, color="dimgray", ha="right")
        for yi, x in zip(y, vals, strict=True):
            if not math.isnan(x):
                pct = f" ({100 * x / roof_bw:.0f} %)" if roof_bw else ""
                ax.text(x, yi, f" {x:,.0f}{pct}", va="center", fontsize=7)
        ax.set_title(f"{name}")
        ax.set_xlabel("GB/s (ncu bytes / ncu time)")
        right = max([x for x in vals if not math.isnan(x)] + [roof_bw or 0])
        ax.set_xlim(0, right * 1.35)
    axes[0].set_yticks(y, variants)
    axes[0].invert_yaxis()
    fig.suptitle(f"Bandwidth roofline at {size_label} (no FLOPs: intensity 0 at every level)")
    fig.tight_layout()
    caption = (
        "These kernels do no arithmetic, so each variant's roofline point sits at intensity 0 "
        "and only the bandwidth roofs bind: the bars are the bytes ncu counted at each level "
        "over ncu's kernel time, the dashed line that level's ceiling from the device table "
        "(measured copy bandwidth for DRAM; the pipeline's L2 and L1 micro-benchmarks, which "
        "measure reads into the SMs: L2's byte count also holds the writes and the traffic "
        "with DRAM, so a kernel that reads and writes can pass that line). Bytes beyond the "
        "minimum (a re-read, a partial sector) lengthen a bar without raising the figure of "
        "merit."
    )
    return save(fig, outdir, "roofline", "Bandwidth roofline", caption)

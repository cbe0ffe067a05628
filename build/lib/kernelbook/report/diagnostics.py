"""The charts that explain a ladder: profiler metrics per variant, prediction against
measurement, the autotuning search and the static SASS instruction mix."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from kernelbook.report.markdown import point_label
from kernelbook.report.plot import Figure, NoData, compact, num, palette, save

# SASS opcode groups of the instruction-mix figure, in stacking order.


SASS_GROUPS = {
    "FFMA": ("FFMA",),
    "other FP32": ("FADD", "FMUL", "FMNMX", "FSETP", "FSEL", "FCHK", "MUFU"),
    "LDS": ("LDS", "LDSM"),
    "STS": ("STS",),
    "LDG": ("LDG",),
    "STG": ("STG",),
    "cp.async": ("LDGSTS", "LDGDEPBAR", "DEPBAR"),
    "barrier": ("BAR", "MEMBAR"),
}


# ------------------------------------------------------------------------------------------
# (d) the metric heatmap


def heatmap(values: pd.DataFrame, outdir, *, size_label: str) -> Figure:
    """Variants (rows) x metrics (columns), coloured per column by value / column maximum."""
    values = values.apply(pd.to_numeric, errors="coerce").dropna(axis=1, how="all")
    if values.empty or values.shape[1] == 0:
        raise NoData("no profiler metric has a value")
    scale = values.abs().max().replace(0, np.nan)
    norm = (values / scale).where(values.notna() & scale.notna().to_numpy(), values * 0)
    annot = values.map(compact)
    fig, ax = plt.subplots(
        figsize=(max(6.0, 1.05 * values.shape[1] + 2.5), max(3.0, 0.42 * values.shape[0] + 1.8))
    )
    sns.heatmap(
        norm,
        annot=annot.to_numpy(),
        fmt="",
        cmap="viridis",
        vmin=0,
        vmax=1,
        cbar_kws={"label": "value / column maximum"},
        annot_kws={"fontsize": 7},
        linewidths=0.4,
        ax=ax,
    )
    ax.set_xticklabels(ax.get_xticklabels(), rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("")
    ax.set_title(f"Profiler metrics at {size_label}")
    caption = (
        "Nsight Compute metrics per variant, each column scaled by its largest value so that "
        "columns with different units compare; the numbers are the raw values."
    )
    return save(fig, outdir, "metrics", "Profiler metrics per variant", caption)


# ------------------------------------------------------------------------------------------
# (e) prediction against measurement


def prediction(
    predicted: dict[str, float],
    measured: dict[str, float],
    order: list[str],
    outdir,
    *,
    baseline_label: str,
    size_label: str,
) -> Figure:
    """Predicted vs measured % of baseline per variant (predictions written before measuring)."""
    vs = [v for v in order if v in predicted]
    if not vs:
        raise NoData("no variant has predict: {pct_of_baseline: ...}")
    if not any(not math.isnan(num(measured.get(v))) for v in vs):
        raise NoData(f"no predicted variant has a measurement at {size_label}")
    colors = palette(order)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(vs) + 2.5), 4.4))
    for i, v in enumerate(vs):
        p, m = float(predicted[v]), num(measured.get(v))
        ax.scatter(i, p, marker="o", s=50, facecolor="white", edgecolor=colors[v], linewidth=1.6)
        if not math.isnan(m):
            ax.plot([i, i], [p, m], color=colors[v], linewidth=1.2)
            ax.scatter(i, m, marker="o", s=50, color=colors[v], edgecolor="black", zorder=4)
            ax.annotate(
                f"{m / p:.2g}x", (i, m), textcoords="offset points", xytext=(6, 0), fontsize=7
            )
    ax.set_yscale("log")
    ax.set_xticks(range(len(vs)), vs, rotation=30, ha="right")
    ax.set_ylabel(f"% of {baseline_label} (log scale)")
    ax.set_title(f"Predicted (open) and measured (filled) at {size_label}")
    caption = (
        "Open circles: the study config's predict: pct_of_baseline, written before measuring. "
        "Filled circles: the measurement; the label is measured over predicted."
    )
    return save(fig, outdir, "prediction", "Prediction against measurement", caption)


# ------------------------------------------------------------------------------------------
# (f) the autotuning search


def autotune(
    candidates: pd.DataFrame,
    winners: pd.DataFrame,
    outdir,
    *,
    metric: str = "tflops",
) -> Figure:
    """Every candidate's throughput at each tuned size, the winner starred and named."""
    if candidates is None or candidates.empty:
        raise NoData("no autotuning candidates were measured")
    tuned = list(dict.fromkeys(candidates["tuned_from"].dropna()))
    unit = "TFLOP/s" if metric == "tflops" else "GB/s"
    fig, axes = plt.subplots(
        len(tuned),
        1,
        figsize=(8.0, 3.8 * len(tuned)),
        squeeze=False,
        sharex=False,
        layout="constrained",  # rotated size labels clear the next panel's title
    )
    rng = np.random.default_rng(0)
    for ax, t in zip(axes[:, 0], tuned, strict=True):
        c = candidates[candidates["tuned_from"] == t]
        keys = ["flop", "bytes_min"] if "bytes_min" in c else ["flop"]
        sizes = (
            c[["size", *keys]]
            .drop_duplicates("size")
            .sort_values([*keys, "size"], kind="stable")["size"]
            .tolist()
        )
        ok = c[(c["status"] == "ok") & c[metric].notna()]
        bad = c[c["status"] != "ok"]
        for i, s in enumerate(sizes):
            y = ok[ok["size"] == s][metric].to_numpy(dtype=float)
            ax.scatter(
                i + rng.uniform(-0.18, 0.18, len(y)), y, s=14, alpha=0.6, color="tab:blue", lw=0
            )
            w = winners[(winners["variant"] == t) & (winners["size"] == s)]
            if len(w) and w.iloc[0]["status"] == "ok":
                wy = float(w.iloc[0][metric])
                ax.scatter(i, wy, marker="*", s=160, color="gold", edgecolor="black", zorder=5)
                point = point_label(w.iloc[0].get("tune_point"))
                ax.annotate(point, (i, wy), textcoords="offset points", xytext=(8, 4), fontsize=6)
        n_c = c["variant"].nunique()
        ax.set_xticks(range(len(sizes)), sizes, rotation=25, ha="right")
        ax.set_ylabel(unit)
        ax.set_title(
            f"{t}: {n_c} candidates, {len(bad)} (candidate, size) not run or failed", fontsize=9
        )
    fig.suptitle("Autotuning search", fontweight="bold")
    caption = (
        f"Each dot is one candidate's median {unit} at one size; the star is the candidate the "
        "tuned variant uses at that size (fastest correct one), labelled with its parameters."
    )
    return save(fig, outdir, "autotune", "Autotuning search", caption)


# ------------------------------------------------------------------------------------------
# SASS instruction mix (used by the sgemm study's own notebook; any study may use it)


def sass_groups(sass: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """Static SASS instruction counts per variant and opcode group (other = the rest)."""
    if sass is None or sass.empty:
        raise NoData("no SASS histogram")
    group_of = {op: g for g, ops in SASS_GROUPS.items() for op in ops}
    df = sass.assign(group=sass["op"].map(group_of).fillna("other"))
    table = df.pivot_table(index="variant", columns="group", values="count", aggfunc="sum")
    cols = [g for g in [*SASS_GROUPS, "other"] if g in table.columns]
    rows = [v for v in order if v in table.index] + [v for v in table.index if v not in order]
    return table.reindex(index=rows, columns=cols).fillna(0).astype(int)


def sass_mix(sass: pd.DataFrame, order: list[str], outdir) -> Figure:
    """Stacked bars of each variant's static SASS mix: FFMA, shared and global traffic, rest."""
    table = sass_groups(sass, order)
    frac = table.div(table.sum(axis=1), axis=0)
    colors = dict(zip(table.columns, sns.color_palette("Set2", len(table.columns)), strict=True))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(max(9.0, 0.9 * len(table) + 5), 4.6))
    for ax, data, label in ((a1, table, "instructions"), (a2, frac * 100, "% of instructions")):
        bottom = np.zeros(len(data))
        for g in data.columns:
            ax.bar(range(len(data)), data[g], bottom=bottom, color=colors[g], label=g, width=0.7)
            bottom += data[g].to_numpy(dtype=float)
        ax.set_xticks(range(len(data)), data.index, rotation=30, ha="right")
        ax.set_ylabel(label)
    for i, v in enumerate(table.index):
        ffma, lds = table.loc[v].get("FFMA", 0), table.loc[v].get("LDS", 0)
        if lds:
            a2.text(i, 101, f"{ffma / lds:.2g}", ha="center", va="bottom", fontsize=7)
    a2.set_ylim(0, 110)
    a2.set_title("share (label: FFMA per LDS)", fontsize=9)
    a1.set_title("static count in the entry function", fontsize=9)
    a2.legend(
        *a1.get_legend_handles_labels(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1)
    )
    fig.suptitle("SASS instruction mix per variant", fontweight="bold")
    caption = (
        "Opcode histogram of each variant's compiled entry function (cuobjdump -sass), grouped. "
        "Static counts: an unrolled loop body counts once, so this shows the code's make-up "
        "(FFMA per shared load, vector widths), not dynamic instruction counts (see ncu)."
    )
    return save(fig, outdir, "sass_mix", "SASS instruction mix", caption)

"""The three-regime model: overhead-, memory- or compute-bound, predicted, then measured.

For a variant at a size, the predicted time is the largest of three terms:

    overhead = launch overhead x launches           (the device table's cost of an op)
    memory   = traffic x bytes_min / copy bandwidth  (the device table's measured copy)
    compute  = flop / peak                           (BF16 tensor peak for matmul: the
                                                      measured cuBLAS BF16 rate; else the
                                                      theoretical FP32 peak)

and the term that is largest *binds*. ``launches`` (kernels one call launches) and
``traffic`` (bytes moved, in multiples of the op's minimum) are the variant's
``predict:`` entries, written before measuring (default 1 each); ``graph: 1`` says the
launches are replayed from a CUDA graph. The launch overheads are what an op costs its
caller, host included, as the regimes study measures its rows (``timing.method: host``: wall
time per call over back-to-back calls): the device table's ``launch_overhead_us`` is an op
of a chain of tiny eager PyTorch ops (the dispatch and launch of each), and
``launch_overhead_graph_us`` an op of the same chain replayed from a CUDA graph (the
replay's own cost spread over its ops, as measured). So an eager variant's overhead is
``launch_overhead_us`` x launches and a graph variant's ``launch_overhead_graph_us`` x
launches: the overhead regime is the caller's cost of a call, Python's dispatch included.

The measurements table's rows carry the prediction (``predicted_ms``, ``predicted_bound``)
and, for measured rows, ``prediction_error`` = measured / predicted - 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kernelbook import tables

TERMS = ("overhead", "memory", "compute")
COLORS = {"overhead": "#fde0c5", "memory": "#c6dbef", "compute": "#d9f0d3"}


# What the device table's launch-overhead rows say of their method since they are the
# caller's cost (kernelbook.measure.device.HOST_WALL_TIME); before, they were the GPU time of
# an empty kernel, which this model no longer means.
HOST_INCLUSIVE = "host wall time"
LAUNCH_ROWS = ("launch_overhead_us", "launch_overhead_graph_us")


class RegimesError(ValueError):
    """A device table or study that the model cannot use; the message names what is missing."""


@dataclass(frozen=True)
class Ceilings:
    launch_us: float
    launch_graph_us: float
    copy_gbps: float
    fp32_tflops: float
    bf16_tflops: float

    @classmethod
    def of(cls, device: pd.DataFrame, source: str = "device table") -> Ceilings:
        vals = tables.device_values(device)

        def need(*names):
            for n in names:
                if n in vals:
                    return vals[n]
            raise RegimesError(
                f"{source}: no {' or '.join(names)} row (measured by `kernelbook device` "
                "since launch overheads were added: run the device rule again)"
            )

        if "method" in device:
            rows = device[device["quantity"].isin(LAUNCH_ROWS)]
            old = rows[~rows["method"].astype(str).str.contains(HOST_INCLUSIVE, regex=False)]
            if len(old):
                raise RegimesError(
                    f"{source}: {', '.join(dict.fromkeys(old['quantity']))} measured as the "
                    "GPU time of an empty kernel, not as the host-inclusive cost of an op the "
                    "model uses now: run the device rule again (delete the table first)"
                )
        return cls(
            launch_us=need("launch_overhead_us"),
            launch_graph_us=need("launch_overhead_graph_us"),
            copy_gbps=need("copy_gbps"),
            fp32_tflops=need("fp32_peak_tflops"),
            bf16_tflops=need("cublas_bf16_tflops", "bf16_tensor_peak_tflops"),
        )


@dataclass(frozen=True)
class Shape:
    """What the model needs of a variant (from study.json's variant entry)."""

    op: str = "scale"
    launches: float = 1.0
    traffic: float = 1.0
    graph: bool = False

    @classmethod
    def of(cls, variant: dict) -> Shape:
        p = variant.get("predict") or {}
        return cls(
            op=variant.get("computes") or "scale",
            launches=float(p.get("launches", 1)),
            traffic=float(p.get("traffic", 1)),
            graph=bool(p.get("graph", 0)),
        )


def terms(flop: float, nbytes: float, shape: Shape, c: Ceilings) -> dict[str, float]:
    """The three terms in milliseconds."""
    per_op = c.launch_graph_us if shape.graph else c.launch_us
    overhead_us = per_op * shape.launches
    peak = c.bf16_tflops if shape.op == "matmul" else c.fp32_tflops
    return {
        "overhead": overhead_us * 1e-3,
        "memory": shape.traffic * nbytes / (c.copy_gbps * 1e9) * 1e3,
        "compute": flop / (peak * 1e12) * 1e3,
    }


def predict(flop: float, nbytes: float, shape: Shape, c: Ceilings) -> tuple[float, str]:
    """(predicted ms, binding term)."""
    t = terms(flop, nbytes, shape, c)
    bound = max(TERMS, key=lambda k: t[k])
    return t[bound], bound


def shapes(meta: dict) -> dict[str, Shape]:
    return {v["id"]: Shape.of(v) for v in meta.get("variants", [])}


def annotate(meas: pd.DataFrame, device: pd.DataFrame, meta: dict) -> pd.DataFrame:
    """``meas`` with predicted_ms, predicted_bound and prediction_error filled per row."""
    c = Ceilings.of(device)
    sh = shapes(meta)
    pred, bound, err = [], [], []
    for _, r in meas.iterrows():
        s = sh.get(r["variant"]) or sh.get(r.get("tuned_from") or "") or Shape()
        ms, b = predict(float(r["flop"]), float(r["bytes_min"]), s, c)
        pred.append(ms)
        bound.append(b)
        got = r.get("median_ms")
        ok = r.get("status") == "ok" and got is not None and not pd.isna(got)
        err.append(float(got) / ms - 1.0 if ok else None)
    return meas.assign(predicted_ms=pred, predicted_bound=bound, prediction_error=err)


def crossover(shape: Shape, c: Ceilings, cost, lo: float = 1.0, hi: float = 1e12) -> dict:
    """Where the model's binding term changes as N grows: {"overhead->memory": N, ...}.

    ``cost(N) -> (flop, bytes)`` (continuous in N); found by bisection on log N between
    the grid points where the binding term differs (a 200-point log grid from lo to hi).
    """
    grid = np.logspace(math.log10(lo), math.log10(hi), 200)
    bounds = [predict(*cost(n), shape, c)[1] for n in grid]
    out = {}
    for i in range(1, len(grid)):
        if bounds[i] != bounds[i - 1]:
            a, b = math.log(grid[i - 1]), math.log(grid[i])
            for _ in range(60):
                m = (a + b) / 2
                if predict(*cost(math.exp(m)), shape, c)[1] == bounds[i - 1]:
                    a = m
                else:
                    b = m
            out[f"{bounds[i - 1]}->{bounds[i]}"] = math.exp(b)
    return out


def op_cost(op: str, params: dict | None = None):
    """``cost(N)`` of an op of the regimes problem, continuous in N (for crossovers)."""
    from kernelbook.problems.regimes import ITEMSIZE

    hidden = float((params or {}).get("hidden", 1024))
    if op == "matmul":
        return lambda n: (2.0 * n**1.5, 3.0 * n * ITEMSIZE)
    if op == "layernorm":
        return lambda n: (8.0 * n, (2.0 * n + 2 * min(n, hidden)) * ITEMSIZE)
    if op == "sum":
        return lambda n: (float(n), (n + 1.0) * ITEMSIZE)
    if op == "chain":
        return lambda n: (4.0 * n, 2.0 * n * ITEMSIZE)
    return lambda n: (float(n), 2.0 * n * ITEMSIZE)


def measured_knee(n: np.ndarray, ms: np.ndarray, factor: float = 2.0) -> float | None:
    """The N at which the measured time first reaches ``factor`` x its small-size floor
    (log-log interpolation): where the overhead regime ends in the measurement."""
    order = np.argsort(n)
    n, ms = np.asarray(n, float)[order], np.asarray(ms, float)[order]
    if len(n) < 2:
        return None
    target = factor * float(np.min(ms[: max(1, len(ms) // 3)]))
    for i in range(1, len(n)):
        if ms[i] >= target > ms[i - 1]:
            f = (math.log(target) - math.log(ms[i - 1])) / (math.log(ms[i]) - math.log(ms[i - 1]))
            return float(math.exp(math.log(n[i - 1]) + f * (math.log(n[i]) - math.log(n[i - 1]))))
    return None


def crossover_table(meas: pd.DataFrame, device: pd.DataFrame, meta: dict) -> pd.DataFrame:
    """Per variant: the model's crossovers and the measured knee, in elements N."""
    c = Ceilings.of(device)
    params = meta.get("params") or {}
    rows = []
    for vid, s in shapes(meta).items():
        cross = crossover(s, c, op_cost(s.op, params))
        df = meas[(meas["variant"] == vid) & (meas["status"] == "ok")]
        knee = measured_knee(df["N"].to_numpy(), df["median_ms"].to_numpy()) if len(df) else None
        rows.append(
            {
                "variant": vid,
                "op": s.op,
                "overhead->memory": cross.get("overhead->memory"),
                "overhead->compute": cross.get("overhead->compute"),
                "memory->compute": cross.get("memory->compute"),
                "measured_knee": knee,
            }
        )
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------
# Figures (drawn by analysis/regimes.ipynb)


def _ok(meas: pd.DataFrame) -> pd.DataFrame:
    df = meas[meas["status"] == "ok"]
    if df.empty:
        from kernelbook.report.plot import NoData

        raise NoData("no measured row")
    return df


def _shade(ax, s: Shape, c: Ceilings, params, lo, hi):
    """Shade the N ranges where each term binds, for the op of shape ``s``."""
    cost = op_cost(s.op, params)
    cuts = sorted(crossover(s, c, cost, lo, hi).items(), key=lambda kv: kv[1])
    edges = [lo] + [v for _, v in cuts] + [hi]
    first = predict(*cost(lo), s, c)[1]
    names = [first] + [k.split("->")[1] for k, _ in cuts]
    for a, b, name in zip(edges[:-1], edges[1:], names, strict=True):
        ax.axvspan(a, b, color=COLORS[name], alpha=0.6, lw=0, label=f"{name}-bound (model)")
    for k, v in cuts:
        ax.axvline(v, color="0.4", lw=0.8, ls=":")
        ax.annotate(
            f"{k}\nN={v:.3g}",
            (v, 0.02),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            rotation=90,
            ha="right",
            va="bottom",
        )


def regimes_figure(meas, device, meta, outdir, order: list[str]):
    """Measured time against N per op (one panel each), model dashed, regimes shaded."""
    import matplotlib.pyplot as plt

    from kernelbook.report import plot

    df = _ok(meas)
    c = Ceilings.of(device)
    sh = shapes(meta)
    params = meta.get("params") or {}
    ops = list(dict.fromkeys(sh[v].op for v in order if v in sh))
    cols = min(3, len(ops))
    nrows = math.ceil(len(ops) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.8 * nrows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[len(ops) :]:
        ax.set_visible(False)
    colors = plot.palette(order)
    lo, hi = float(df["N"].min()) / 2, float(df["N"].max()) * 2
    for ax, op in zip(flat, ops, strict=False):
        vs = [v for v in order if v in sh and sh[v].op == op]
        _shade(ax, sh[vs[0]], c, params, lo, hi)
        for v in vs:
            d = df[df["variant"] == v].sort_values("N", kind="stable")
            if d.empty:
                continue
            ax.plot(d["N"], d["median_ms"] * 1e3, "o-", color=colors[v], label=v, ms=4)
            ax.plot(d["N"], d["predicted_ms"] * 1e3, "--", color=colors[v], lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_title(op)
        ax.set_xlabel("elements N")
        ax.set_ylabel("time (µs)")
        handles, labels = ax.get_legend_handles_labels()
        seen = dict(zip(labels, handles, strict=True))
        ax.legend(seen.values(), seen.keys(), fontsize=7)
    fig.tight_layout()
    caption = (
        "Measured median time (dots) against the element count N, per op; dashed: the "
        "three-term model max(launch overhead, bytes / copy bandwidth, FLOP / peak) with the "
        "device table's numbers; shaded: where the model says each term binds (for the "
        "panel's first variant), dotted lines at its crossover sizes. "
        + crossover_text(crossover_table(meas, device, meta))
    )
    return plot.save(fig, outdir, "regimes", "Three regimes: time against size", caption)


def error_figure(meas, outdir, order: list[str]):
    """measured / predicted - 1 per row, against N, coloured by variant."""
    import matplotlib.pyplot as plt

    from kernelbook.report import plot

    df = _ok(meas)
    colors = plot.palette(order)
    markers = {"overhead": "o", "memory": "s", "compute": "^"}
    fig, ax = plt.subplots(figsize=(8, 4))
    for v in order:
        d = df[df["variant"] == v]
        for b, m in markers.items():
            e = d[d["predicted_bound"] == b]
            if len(e):
                ax.scatter(e["N"], 1 + e["prediction_error"], color=colors[v], marker=m, s=20)
        if len(d):
            d = d.sort_values("N", kind="stable")
            ax.plot(d["N"], 1 + d["prediction_error"], color=colors[v], lw=0.8, label=v)
    ax.axhline(1, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("elements N")
    ax.set_ylabel("measured / predicted")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    caption = (
        "The model's error per row: circles where it predicts overhead-bound, squares "
        "memory-bound, triangles compute-bound; above 1 the op is slower than the model "
        "(the table's prediction_error is this ratio minus 1)."
    )
    return plot.save(fig, outdir, "prediction_error", "Prediction error per row", caption)


def graph_figure(meas, outdir, eager: str, graphed: str):
    """Eager against CUDA-graph replay of the same op: time and their ratio against N."""
    import matplotlib.pyplot as plt

    from kernelbook.report import plot

    df = _ok(meas)
    a = df[df["variant"] == eager].set_index("N")["median_ms"]
    b = df[df["variant"] == graphed].set_index("N")["median_ms"]
    both = sorted(set(a.index) & set(b.index))
    if not both:
        raise plot.NoData(f"no size where both {eager} and {graphed} were measured")
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
    ax.plot(both, [a[n] * 1e3 for n in both], "o-", label=eager)
    ax.plot(both, [b[n] * 1e3 for n in both], "s-", label=graphed)
    ax.set_yscale("log")
    ax.set_ylabel("time (µs)")
    ax.legend(fontsize=8)
    ax2.plot(both, [a[n] / b[n] for n in both], "k.-")
    ax2.axhline(1, color="0.5", lw=0.8)
    ax2.set_xscale("log")
    ax2.set_xlabel("elements N")
    ax2.set_ylabel(f"{eager} / {graphed}")
    fig.tight_layout()
    caption = (
        f"The same ops launched one by one ({eager}) and replayed from a CUDA graph "
        f"({graphed}): the graph removes per-launch cost where the overhead term binds, and "
        "the two meet where memory binds."
    )
    return plot.save(fig, outdir, "graph", "CUDA graph against eager launches", caption)


def graph_pair(meta: dict) -> tuple[str, str] | None:
    """(eager, graph) ids: the first graph variant and the first plain variant of its op
    with as many launches."""
    sh = shapes(meta)
    for g, s in sh.items():
        if s.graph:
            for e, t in sh.items():
                if not t.graph and t.op == s.op and t.launches == s.launches:
                    return e, g
    return None


def crossover_text(table: pd.DataFrame) -> str:
    """One sentence per variant: the model's crossovers and the measured knee."""
    from kernelbook.report.markdown import fmt

    parts = []
    for _, r in table.iterrows():
        cuts = [
            f"{k} at N = {fmt(r[k], 3)}"
            for k in ("overhead->memory", "overhead->compute", "memory->compute")
            if r[k] is not None and not pd.isna(r[k])
        ]
        knee = r["measured_knee"]
        parts.append(
            f"{r['variant']}: model {', '.join(cuts) or 'one regime throughout'}; measured "
            + (
                f"time doubles its floor at N = {fmt(knee, 3)}"
                if knee is not None and not pd.isna(knee)
                else "time never doubles its floor"
            )
        )
    return "Crossovers. " + "; ".join(parts) + "."


def draw(meas, device, meta, outdir, order, graph_pair=None) -> list:
    """Every regimes figure the data allows; one that cannot be drawn says why."""
    from kernelbook.report import plot

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    out = []
    try:
        meas = (
            annotate(meas, device, meta)
            if "predicted_ms" not in meas or meas["predicted_ms"].isna().all()
            else meas
        )
    except RegimesError as e:
        return [plot.Figure(n, t, skipped=str(e)) for n, t in FIGURES]
    jobs = [
        ("regimes", lambda: regimes_figure(meas, device, meta, outdir, order)),
        ("prediction_error", lambda: error_figure(meas, outdir, order)),
    ]
    if graph_pair:
        jobs.append(("graph", lambda: graph_figure(meas, outdir, *graph_pair)))
    titles = dict(FIGURES)
    for name, fn in jobs:
        try:
            out.append(fn())
        except plot.NoData as e:
            out.append(plot.Figure(name, titles[name], skipped=str(e)))
    return out


FIGURES = (
    ("regimes", "Three regimes: time against size"),
    ("prediction_error", "Prediction error per row"),
    ("graph", "CUDA graph against eager launches"),
)

"""A study's tables loaded as one StudyData, and the selections every page section and figure
shares: ladder order, headline rows, baseline and figure of merit, summary, profiler metrics."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kernelbook import problems, tables
from kernelbook.layout import BASELINE_PREFIX
from kernelbook.layout import DATA_TABLES as TABLES
from kernelbook.report.markdown import as_float, distinct, isnull
from kernelbook.report.meta import meta_from_data

# Roofline columns shown in the heatmap and compared step to step (in this order).
ROOFLINE_METRICS = {
    "tflops": "TFLOP/s (ncu)",
    "dram_gbps": "DRAM GB/s",
    "l2_gbps": "L2 GB/s",
    "ai_dram": "FLOP/DRAM byte",
    "ai_l1": "FLOP/L1 byte",
    "sm_throughput_pct": "SM throughput %",
    "memory_throughput_pct": "memory throughput %",
    "achieved_occupancy_pct": "occupancy %",
    "registers_per_thread": "registers",
    "tensor_pipe_pct": "tensor pipe %",
    "hmma_inst": "HMMA inst",
    "hgmma_inst": "HGMMA inst",
    "smem_bank_conflicts_ld": "smem ld conflicts",
    "smem_bank_conflicts_st": "smem st conflicts",
    "smem_bank_conflicts_ldsm": "ldmatrix conflicts",
    "global_ld_sectors_per_request": "ld sectors/request",
    "global_st_sectors_per_request": "st sectors/request",
    "top_stall_ratio": "top stall ratio",
    "dram_bytes": "DRAM bytes",
    "l2_bytes": "L2 bytes",
    "l1_bytes": "L1 bytes",
}
# The heatmap's subset: rates and ratios, not the raw byte counts behind them.
HEATMAP_METRICS = (
    "tflops",
    "dram_gbps",
    "l2_gbps",
    "ai_dram",
    "sm_throughput_pct",
    "memory_throughput_pct",
    "achieved_occupancy_pct",
    "registers_per_thread",
    "tensor_pipe_pct",
    "hmma_inst",
    "hgmma_inst",
    "smem_bank_conflicts_ld",
    "smem_bank_conflicts_st",
    "smem_bank_conflicts_ldsm",
    "global_ld_sectors_per_request",
    "global_st_sectors_per_request",
    "top_stall_ratio",
)
# ncu metrics preferred for the heatmap when only the long profile table is there.
PROFILE_METRICS = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram__bytes.sum",
    "dram__bytes_read.sum",
    "lts__t_bytes.sum",
    "l1tex__t_bytes.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "launch__registers_per_thread",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
)


# ------------------------------------------------------------------------------------------
# Loading


@dataclass
class StudyData:
    meta: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    mode: str = "measured"  # or "replay": rendered from published data, not measured here
    origin: str = ""  # the folder the tables were read from
    run: dict | None = None  # the measuring run's wall time (kernelbook.runlog.summary)

    def table(self, name: str) -> pd.DataFrame | None:
        df = self.tables.get(name)
        return None if df is None or df.empty else df

    @property
    def measurements(self) -> pd.DataFrame:
        return self.tables["measurements"]

    @property
    def study(self) -> str:
        return self.meta.get("study") or str(self.measurements["study"].iloc[0])


def load(paths: Mapping[str, str | Path], mode: str = "measured") -> StudyData:
    """Read the tables named in ``paths`` (keys: TABLES and 'meta'); optional ones may be absent.

    Absent means: no key, or a path that does not exist. measurements is required.
    """
    if mode not in ("measured", "replay"):
        raise ValueError(f"mode must be 'measured' or 'replay', not {mode!r}")
    paths = {k: Path(v) for k, v in paths.items() if v}
    if "measurements" not in paths or not paths["measurements"].is_file():
        raise FileNotFoundError(f"no measurements table at {paths.get('measurements')}")
    loaded = {}
    for name in TABLES:
        p = paths.get(name)
        if p is not None and p.is_file():
            loaded[name] = tables.canonical(tables.read(p))
    prof = loaded.get("profile")
    if prof is not None and "status" in prof.columns:
        # not_run and failed rows hold no metric: the failures section reads them
        loaded["profile_status"] = prof
        loaded["profile"] = prof[prof["status"].isna() | (prof["status"] == "ok")]
    meas = loaded["measurements"]
    meta_path = paths.get("meta")
    meta = (
        json.loads(meta_path.read_text())
        if meta_path is not None and meta_path.is_file()
        else meta_from_data(meas)
    )
    run_path = paths.get("run")
    run = (
        json.loads(run_path.read_text())["run"]
        if run_path is not None and run_path.is_file()
        else None
    )
    return StudyData(meta, loaded, mode, str(paths["measurements"].parent), run)


def failures(data: StudyData) -> list:
    """The study's failed (variant, size) pairs, as the bench gate sees them."""
    from kernelbook import gate

    expects = {v["id"]: v.get("expect") for v in data.meta.get("variants", [])}
    return gate.failures(
        data.study,
        expects,
        build=data.table("build"),
        measurements=data.measurements,
        profile=data.table("profile_status"),
    )


def ladder_order(data: StudyData) -> list[str]:
    """Config order; measured variants the config does not know go last, never dropped."""
    order = [v["id"] for v in data.meta.get("variants", [])]
    main = data.measurements[data.measurements["variant_kind"] != "candidate"]
    return order + [v for v in dict.fromkeys(main["variant"]) if v not in order]


def variant_info(data: StudyData, vid: str) -> dict:
    for v in data.meta.get("variants", []):
        if v["id"] == vid:
            return v
    return {"id": vid, "says": "", "predict": {}, "header": "", "tuned": False}


def main_rows(data: StudyData) -> pd.DataFrame:
    """Rows of the ladder's variants (plain ones, and the tuned winner per size)."""
    m = data.measurements
    return m[m["variant_kind"] != "candidate"]


def candidate_rows(data: StudyData) -> pd.DataFrame:
    m = data.measurements
    return m[m["variant_kind"] == "candidate"]


def sizes_by_flop(df: pd.DataFrame) -> list[str]:
    """Sizes by FLOPs, then minimal bytes (bandwidth problems may count no FLOPs)."""
    keys = ["flop", "bytes_min"] if "bytes_min" in df else ["flop"]
    return (
        df[["size", *keys]]
        .drop_duplicates("size")
        .sort_values([*keys, "size"], kind="stable")["size"]
        .tolist()
    )


def headline_size(data: StudyData) -> str:
    """The study's headline size; without one, the largest size measured."""
    h = data.meta.get("headline")
    if h:
        return h
    sizes = sizes_by_flop(main_rows(data))
    return sizes[-1] if sizes else ""


def headline_rows(data: StudyData) -> pd.DataFrame:
    """One row per ladder variant measured at the headline size (index: variant)."""
    return rows_at(data, headline_size(data))


def rows_at(data: StudyData, size: str) -> pd.DataFrame:
    """One row per ladder variant measured at ``size`` (index: variant)."""
    rows = main_rows(data)
    rows = rows[rows["size"] == size]
    return rows.drop_duplicates("variant", keep="last").set_index("variant", drop=False)


def second_size(data: StudyData) -> str | None:
    """The study's second headline size (config ``second_headline``) where rows were measured
    at it and it is not the headline; else None."""
    s = data.meta.get("second_headline")
    if not s or s == headline_size(data) or s not in set(main_rows(data)["size"]):
        return None
    return s


def ladder_sass(data: StudyData) -> pd.DataFrame | None:
    """SASS histogram rows of the ladder's variants; a tuned variant shows its headline winner."""
    sass = data.table("sass")
    if sass is None:
        return None
    order = ladder_order(data)
    head = headline_rows(data)
    rename = {}
    for v in order:
        if v in head.index and not isnull(head.loc[v].get("tune_point")):
            rename[candidate_id(v, head.loc[v, "tune_point"])] = v
    rows = sass[sass["variant"].isin(set(order) | set(rename))]
    return rows.assign(variant=rows["variant"].replace(rename))


def problem_attr(data: StudyData, name: str, default):
    """An attribute of the study's problem (figure of merit, roofline roof, sweep facets);
    ``default`` for a problem this version does not know (tables from elsewhere)."""
    try:
        return getattr(problems.get(data.meta.get("problem", "")), name)
    except KeyError:
        return default


def figure_of_merit(data: StudyData) -> str:
    fom = data.meta.get("figure_of_merit")
    if fom in ("tflops", "gbps"):
        return fom
    return problem_attr(data, "figure_of_merit", "tflops")


def baseline_label(data: StudyData) -> str:
    """'cuBLAS' from 'cuBLAS via torch ... TF32 off'; else the config's baseline name."""
    modes = data.measurements.get("baseline_mode")
    if modes is not None:
        for m in modes.dropna():
            if str(m).strip():
                return str(m).split()[0]
    return str(data.meta.get("baseline") or "baseline")


def reference_variants(data: StudyData) -> set[str]:
    """Variants that compute another function than the problem's (transpose's copy): kept
    out of the headline. An alternative that computes the problem's outputs and more (the
    problem's ``supersets``) is a ladder step like any other."""
    sup = problem_attr(data, "supersets", frozenset())
    return {
        v["id"]
        for v in data.meta.get("variants", [])
        if v.get("computes") and v["computes"] not in sup
    }


def summary(data: StudyData) -> dict:
    """The headline numbers: best variant at the headline size, and the baseline there."""
    h = headline_rows(data)
    refs = reference_variants(data)
    ok = h[(h["status"] == "ok") & h["pct_of_baseline"].notna() & ~h["variant"].isin(refs)]
    meas = data.measurements
    dates = pd.to_datetime(meas["measured_at"], utc=True)
    out = {
        "study": data.study,
        "title": data.meta.get("title") or data.study,
        "gpu": distinct(meas, "gpu_name"),
        "headline": headline_size(data),
        "baseline": baseline_label(data),
        "variants": len(ladder_order(data)),
        "measured_from": dates.min().strftime("%Y-%m-%d") if len(dates) else None,
        "measured_to": dates.max().strftime("%Y-%m-%d") if len(dates) else None,
        "best": None,
    }
    if len(ok):
        best = ok.loc[ok["pct_of_baseline"].astype(float).idxmax()]
        fom = figure_of_merit(data)
        out["best"] = {
            "variant": best["variant"],
            "pct_of_baseline": float(best["pct_of_baseline"]),
            "median_ms": float(best["median_ms"]),
            fom: as_float(best.get(fom)),
            f"baseline_{fom}": as_float(best.get(f"baseline_{fom}")),
            "pct_of_copy": as_float(best.get("pct_of_copy")),
            "copy_kind": copy_word(ok),
        }
    return out


def copy_word(rows) -> str:
    """What a bandwidth study's same-bytes reference was: 'read' (a streaming read, the
    study's bandwidth_reference) or 'copy' (a device copy; tables from before copy_kind)."""
    if isinstance(rows, dict):
        return "read" if rows.get("copy_kind") == "read" else "copy"
    kinds = set(rows["copy_kind"].dropna()) if "copy_kind" in rows else set()
    return "read" if kinds == {"read"} else "copy"


def candidate_id(tuned: str, tune_point: str) -> str:
    """The candidate id of a tuning point (kernelbook.config names them so)."""
    from kernelbook.config import CANDIDATE_SEP

    point = json.loads(tune_point)
    return tuned + CANDIDATE_SEP + "_".join(f"{k}{val}" for k, val in point.items())


# ------------------------------------------------------------------------------------------
# Profiler: which size, what changed


def profile_size(data: StudyData, df: pd.DataFrame | None) -> str | None:
    """The headline size if the profile has it, else the size with the most variants."""
    if df is None or df.empty:
        return None
    h = headline_size(data)
    if h in set(df["size"]):
        return h
    counts = df.groupby("size")["variant"].nunique()
    best = counts[counts == counts.max()].index
    flops = {s: i for i, s in enumerate(sizes_by_flop(data.measurements))}
    return max(best, key=lambda s: flops.get(s, -1))


def metric_table(data: StudyData) -> tuple[pd.DataFrame | None, str | None, str]:
    """variant x metric at one size, from roofline.parquet (preferred) or profile.parquet."""
    order = ladder_order(data)
    roof = data.table("roofline")
    if roof is not None:
        size = profile_size(data, roof)
        sub = roof[roof["size"] == size].drop_duplicates("variant", keep="last")
        cols = [c for c in HEATMAP_METRICS if c in sub and sub[c].notna().any()]
        t = sub.set_index("variant")[cols].rename(columns=ROOFLINE_METRICS)
        t = t.reindex([v for v in order if v in t.index])
        return t, size, "roofline.parquet"
    prof = data.table("profile")
    if prof is not None:
        size = profile_size(data, prof)
        sub = prof[prof["size"] == size]
        wide = sub.pivot_table(index="variant", columns="metric", values="value", aggfunc="last")
        wide = wide.reindex([v for v in order if v in wide.index])
        cols = [c for c in PROFILE_METRICS if c in wide]
        if not cols:
            logs = np.log10(wide.where(wide > 0))
            cols = (
                logs.std().sort_values(ascending=False, kind="stable").dropna().index[:12].tolist()
            )
        return wide[cols], size, "profile.parquet"
    return None, None, ""


def worth_comparing(name: str, larger: float, names: set[str] = frozenset()) -> bool:
    """Whether a change of metric ``name`` (its larger value of the two) tells a reader
    something: not a .min or .max beside the metric's average or sum, nor a count's .avg
    (per unit) beside its .sum in ``names`` (the same change, shown once), nor a share of peak
    under 1 %, nor a stall reason under 0.05 warps an issue (a 70x change of nothing)."""
    if ".min" in name or ".max" in name:
        return False
    if "pct_of_peak" not in name and ".avg" in name and name.replace(".avg", ".sum", 1) in names:
        return False
    if "pct_of_peak" in name and ".avg." not in name:
        return False  # its .avg is the one read; .sum of a percentage adds units up
    if "pct_of_peak" in name and larger < 1.0:
        return False
    return not (name.endswith("_per_issue_active.ratio") and larger < 0.05)


def metric_deltas(
    data: StudyData, prev: str, cur: str, top: int = 6, at: str | None = None
) -> tuple[list, str | None]:
    """The metrics that changed most (by ratio) from ``prev`` to ``cur``, with their values;
    ``at``: the profiled size to compare at (default: profile_size's)."""
    frames = []
    size = at
    roof = data.table("roofline")
    if roof is not None:
        size = at or profile_size(data, roof)
        sub = (
            roof[roof["size"] == size].drop_duplicates("variant", keep="last").set_index("variant")
        )
        cols = [c for c in ROOFLINE_METRICS if c in sub]
        frames.append(sub[cols].rename(columns=ROOFLINE_METRICS))
    prof = data.table("profile")
    if prof is not None:
        psize = size or profile_size(data, prof)
        sub = prof[prof["size"] == psize]
        frames.append(
            sub.pivot_table(index="variant", columns="metric", values="value", aggfunc="last")
        )
        size = psize
    if not frames:
        return [], None
    wide = pd.concat(frames, axis=1)
    wide = wide.loc[:, ~wide.columns.duplicated()]
    if prev not in wide.index or cur not in wide.index:
        return [], size
    a = pd.to_numeric(wide.loc[prev], errors="coerce")
    b = pd.to_numeric(wide.loc[cur], errors="coerce")
    # finite and positive: ncu reads a persistent grid's waves an SM as inf, and a ratio
    # with inf (or 0) in it says nothing a reader can act on
    keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0) & (a != b)
    names = {str(n) for n in a.index}
    worth = [
        worth_comparing(str(n), max(x, y), names) for n, x, y in zip(a.index, a, b, strict=True)
    ]
    keep &= pd.Series(worth, index=a.index, dtype=bool)
    ratio = (b[keep] / a[keep]).astype(float)
    out, seen = [], set()
    for name in np.abs(np.log(ratio)).sort_values(ascending=False, kind="stable").index:
        pair = (float(a[name]), float(b[name]))
        if pair in seen:  # the same quantity under its roofline and its ncu name
            continue
        seen.add(pair)
        out.append((name, *pair, float(ratio[name])))
        if len(out) == top:
            break
    return out, size


def profiled_baselines(prof: pd.DataFrame) -> list[tuple[str, str]]:
    """(row name, baseline name) of each baseline a profile table holds rows of (profiled
    beside the variants: BASELINE_PREFIX and its name), in name order."""
    rows = {v for v in prof["variant"].astype(str) if v.startswith(BASELINE_PREFIX)}
    return [(v, v[len(BASELINE_PREFIX) :]) for v in sorted(rows)]


def measured_dates(path: str | Path) -> tuple[str, str]:
    """First and last measurement date (YYYY-MM-DD) in a measurements table."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    col = pq.read_table(path, columns=["measured_at"]).column("measured_at")
    if len(col) == 0:
        return "", ""
    lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
    return f"{lo:%Y-%m-%d}", f"{hi:%Y-%m-%d}"

"""A study's worklog: its tables turned into figures and one Markdown/HTML page.

The analysis notebook (analysis/worklog.ipynb) is a thin driver of this module:

    data = worklog.load(paths, mode="measured" | "replay")
    figs = worklog.make_figures(data, figures_dir, study_figures=None)
    worklog.write(data, figs, "worklog.md", "worklog.html")

Every number on the page is formatted from the tables by :func:`fmt` (four significant
digits), so a reader can parse the page back and compare it with the data. Nothing is
hidden: skipped sizes, failed candidates, throttled or unconverged measurements, wrong
results and sanitizer findings are listed near the top and in the full table.

``study.json`` (written by :func:`write_meta`, published beside the data) is what the page
needs from the study config: title, question, ladder order, says/predict per variant,
references, and each kernel's leading comment block.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kernelbook import problems, tables, tune
from kernelbook.report import figures, publish, quality

# One list of a study's tables, kept where publishing is (it copies exactly these).
TABLES = publish.DATA_TABLES
OPTIONAL_TABLES = publish.OPTIONAL
META = "study.json"
DASH = "—"

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
# The study's config, as the page needs it


def leading_comment(text: str) -> str:
    """The comment block a kernel file opens with (// lines or one /* */ block), unmarked."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    out: list[str] = []
    if i < len(lines) and lines[i].lstrip().startswith("/*"):
        for line in lines[i:]:
            s = line.strip()
            end = "*/" in s
            s = s.split("*/")[0].removeprefix("/*").removeprefix("*").rstrip()
            out.append(s[1:] if s.startswith(" ") else s)
            if end:
                break
    else:
        for line in lines[i:]:
            s = line.strip()
            if not s.startswith("//"):
                break
            s = s[2:]
            out.append(s[1:] if s.startswith(" ") else s)
    while out and not out[-1].strip():
        out.pop()
    while out and not out[0].strip():
        out.pop(0)
    return "\n".join(out)


def study_meta(study, root: str | Path) -> dict:
    """What the page needs from a resolved study (kernelbook.config.Study), as plain JSON."""
    from kernelbook.build.nvcc import sha256_source

    root = Path(root)
    problem = problems.get(study.problem)
    variants = []
    for v in study.variants:
        path = root / v.source
        text = path.read_text(errors="replace") if path.is_file() else ""
        cands = [c for c in study.candidates if c.tuned_from == v.id]
        variants.append(
            {
                "id": v.id,
                "source": v.source,
                "entry": v.entry,
                "says": v.says,
                "predict": dict(v.predict),
                "expect": v.expect,
                **({"computes": v.computes} if v.computes else {}),  # a reference kernel
                "header": leading_comment(text),
                "defines": v.defines if not v.is_tuned else {},
                "requires": list(v.requires),
                "tuned": v.is_tuned,
                "candidates": list(v.candidates),
                "tune_space": _tune_space(cands),
                "tune_sizes": [problem.label(s) for s in v.tune_sizes],
                "sweep_pick": (
                    problem.label(tune.sweep_pick(study, v))
                    if v.is_tuned and tune.sweep_sizes(study, v)
                    else None
                ),
                "source_sha256": sha256_source(path) if path.is_file() else None,
                "spec_sha256": None if v.is_tuned else v.spec_sha256(),
            }
        )
    return {
        "study": study.name,
        "path": study.path,
        "title": study.title or study.name,
        "question": study.question,
        "problem": study.problem,
        "dtype": study.dtype,
        "params": study.params,
        "baseline": study.baseline,
        "figure_of_merit": problem.figure_of_merit,
        "size_names": list(problem.size_names),
        "sizes": [problem.label(s) for s in study.sizes],
        "headline": problem.label(study.headline) if study.headline else None,
        "second_headline": (
            problem.label(study.second_headline) if study.second_headline else None
        ),
        "references": [dict(r) for r in study.references],
        "variants": variants,
    }


def _tune_space(cands) -> dict[str, list[int]]:
    space: dict[str, list[int]] = {}
    for c in cands:
        for k, val in c.tune_point.items():
            space.setdefault(k, [])
            if val not in space[k]:
                space[k].append(val)
    return space


def write_meta(study, root, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(study_meta(study, root), indent=1, sort_keys=False) + "\n")
    return path


def meta_from_data(meas: pd.DataFrame) -> dict:
    """A minimal study.json for tables published without one: the order the data has."""
    main = meas[meas["variant_kind"] != "candidate"]
    study = str(meas["study"].iloc[0]) if len(meas) else "study"
    return {
        "study": study,
        "title": study,
        "question": "",
        "problem": str(meas["problem"].iloc[0]) if len(meas) else "",
        "baseline": str(meas["baseline"].iloc[0]) if len(meas) else "baseline",
        "figure_of_merit": "tflops",
        "headline": None,
        "references": [],
        "variants": [
            {"id": v, "says": "", "predict": {}, "header": "", "tuned": False}
            for v in dict.fromkeys(main["variant"])
        ],
    }


# ------------------------------------------------------------------------------------------
# Loading


@dataclass
class StudyData:
    meta: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    mode: str = "measured"  # or "replay": rendered from published data, not measured here
    origin: str = ""  # the folder the tables were read from

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
    from kernelbook import tables

    if mode not in ("measured", "replay"):
        raise ValueError(f"mode must be 'measured' or 'replay', not {mode!r}")
    paths = {k: Path(v) for k, v in paths.items() if v}
    if "measurements" not in paths or not paths["measurements"].is_file():
        raise FileNotFoundError(f"no measurements table at {paths.get('measurements')}")
    loaded = {}
    for name in TABLES:
        p = paths.get(name)
        if p is not None and p.is_file():
            loaded[name] = tables.read(p)
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
    return StudyData(meta, loaded, mode, str(paths["measurements"].parent))


# ------------------------------------------------------------------------------------------
# What the page and the figures show


def fmt(x, digits: int = 4) -> str:
    """A number as the page shows it: four significant digits, DASH for none."""
    if x is None or x is pd.NA:
        return DASH
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return DASH
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if 10**digits <= abs(v) < 1e6:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


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
                _esc(msg if len(msg) <= 300 else msg[:297] + "..."),
            ]
        )
    L.append(md_table(["variant", "sizes", "stage", "kind", "", "message"], rows, "llllll"))
    L.append("")
    return L


def _isnull(x) -> bool:
    if x is None or x is pd.NA:
        return True
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def _true(x) -> bool:
    return not _isnull(x) and bool(x)


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
    rows = main_rows(data)
    rows = rows[rows["size"] == headline_size(data)]
    return rows.drop_duplicates("variant", keep="last").set_index("variant", drop=False)


def ladder_sass(data: StudyData) -> pd.DataFrame | None:
    """SASS histogram rows of the ladder's variants; a tuned variant shows its headline winner."""
    sass = data.table("sass")
    if sass is None:
        return None
    order = ladder_order(data)
    head = headline_rows(data)
    rename = {}
    for v in order:
        if v in head.index and not _isnull(head.loc[v].get("tune_point")):
            rename[candidate_id(v, head.loc[v, "tune_point"])] = v
    rows = sass[sass["variant"].isin(set(order) | set(rename))]
    return rows.assign(variant=rows["variant"].replace(rename))


def _problem_attr(data: StudyData, name: str, default):
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
    return _problem_attr(data, "figure_of_merit", "tflops")


def _extra_baselines_lines(head: pd.DataFrame, best: str, fom: str, unit: str) -> list[str]:
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


def baseline_label(data: StudyData) -> str:
    """'cuBLAS' from 'cuBLAS via torch ... TF32 off'; else the config's baseline name."""
    modes = data.measurements.get("baseline_mode")
    if modes is not None:
        for m in modes.dropna():
            if str(m).strip():
                return str(m).split()[0]
    return str(data.meta.get("baseline") or "baseline")


def summary(data: StudyData) -> dict:
    """The headline numbers: best variant at the headline size, and the baseline there."""
    h = headline_rows(data)
    refs = {v["id"] for v in data.meta.get("variants", []) if v.get("computes")}
    ok = h[(h["status"] == "ok") & h["pct_of_baseline"].notna() & ~h["variant"].isin(refs)]
    meas = data.measurements
    dates = pd.to_datetime(meas["measured_at"], utc=True)
    out = {
        "study": data.study,
        "title": data.meta.get("title") or data.study,
        "gpu": _unique(meas, "gpu_name"),
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
            fom: _float(best.get(fom)),
            f"baseline_{fom}": _float(best.get(f"baseline_{fom}")),
            "pct_of_copy": _float(best.get("pct_of_copy")),
        }
    return out


def _float(x) -> float | None:
    return None if _isnull(x) else float(x)


def _unique(df: pd.DataFrame, col: str) -> str:
    if df is None or col not in df:
        return ""
    vals = [str(v) for v in dict.fromkeys(df[col].dropna()) if str(v) != ""]
    return ", ".join(vals)


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
        "GPU": _unique(m, "gpu_name"),
        "GPU UUID": _unique(m, "gpu_uuid"),
        "driver": _unique(m, "driver_version"),
        "CUDA runtime (driver supports)": (
            f"{_unique(m, 'cuda_version')} ({_unique(m, 'cuda_driver_version')})"
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
        "git commit": _unique(m, "git_commit"),
        "seed": _unique(m, "seed"),
        "cache": _unique(m, "cache")
        + (
            f" (L2 flush {fmt(m['flush_bytes'].max() / 2**20)} MiB before each sample)"
            if "flush_bytes" in m and m["flush_bytes"].max() > 0
            else ""
        ),
        "timing": _unique(m, "timing_method") + ": " + quality.timer_description(m),
        "stopping": quality.stop_reasons(m),
        "baseline": _unique(m, "baseline_mode") or _unique(m, "baseline"),
        "compiler": f"nvcc {_unique(m, 'nvcc_version')}, {_unique(m, 'arch')}, "
        f"flags {_unique(m, 'nvcc_flags')}",
        "software": _unique(m, "software"),
        "host": _unique(m, "hostname"),
        "kernelbook": _unique(m, "kernelbook_version"),
    }
    if build is not None:
        out["build commit"] = _unique(build, "git_commit")
    prof = data.table("profile")
    if prof is not None:
        out["profiler"] = (
            f"Nsight Compute {_unique(prof, 'ncu_version')}, "
            f"clock control {_unique(prof, 'clock_control')}"
        )
    return out


def regenerate_commands(data: StudyData, worklogs: str = "worklogs") -> str:
    """The exact commands that remake this page, and the numbers under it."""
    m = data.measurements
    gpu = _unique(m, "gpu_name") or "the GPU"
    from kernelbook.gpu import slug

    where = f"{worklogs}/{slug(gpu.split(', ')[0])}/{data.study}"
    commits = [str(c) for c in dict.fromkeys(m["git_commit"].dropna())]
    commit = commits[0].removesuffix("-dirty") if commits else "<commit>"
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
        out.append(f"**{v}** skipped at {sizes}: {_esc(reason) if not _isnull(reason) else DASH}")
    for _, r in main[main["status"] == "failed"].iterrows():
        out.append(f"**{r['variant']}** failed at {r['size']}: {_esc(r['reason'])}")
    cand = candidate_rows(data)
    if len(cand):
        bad = cand[cand["status"] != "ok"]
        for t, g in bad.groupby("tuned_from", sort=False):
            reasons = sorted({str(x)[:160] for x in g["reason"].dropna()})
            extra = f" (e.g. {_esc(reasons[0])})" if reasons else ""
            out.append(
                f"**{t}**: {len(g)} of {len(cand[cand['tuned_from'] == t])} candidate "
                f"measurements did not run or failed{extra}; see the candidates table."
            )
    wrong = m[m["correct"].map(lambda x: not _isnull(x) and not bool(x))]
    for _, r in wrong.iterrows():
        out.append(
            f"**{r['variant']}** at {r['size']} is INCORRECT: rel_err {fmt(r['rel_err'])} "
            f"over tolerance {fmt(r['tolerance'])}."
        )
    thr = m[m["throttled"].map(_true)]
    for _, r in thr.iterrows():
        out.append(
            f"**{r['variant']}** at {r['size']} was measured while THROTTLED "
            f"({_esc(r['throttle_reasons']) or 'reason not recorded'}, SM clock min "
            f"{fmt(r['sm_clock_min_mhz'])} MHz)."
        )
    unconv = m[(m["status"] == "ok") & m["converged"].map(lambda x: not _isnull(x) and not x)]
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
                f"**{r['variant']}**: compute-sanitizer {r['tool']} {what}: {r['errors']} "
                f"error(s), {r['warnings']} warning(s)"
                + (f"; {_esc(r['known_reason'])}" if not _isnull(r["known_reason"]) else "")
                + (
                    f"; first: `{_code(r['first_finding'])}`"
                    if not _isnull(r["first_finding"])
                    else ""
                )
            )
    from kernelbook.report.publish import ADDED

    for s in stale or []:
        detail = f" ({_esc(s['detail'])})" if s.get("detail") else ""
        if s["change"] == ADDED:
            on = _unique(m, "gpu_name") or s.get("gpu") or "this GPU"
            out.append(f"**{s['variant']}** is {ADDED} on {on}{detail}.")
            continue
        out.append(
            f"**{s['variant']}** is stale: {s['change']}{detail}"
            "; the numbers here are those of the sources as measured."
        )
    return out


def _esc(text) -> str:
    """Text safe inside a Markdown table cell or bullet."""
    if _isnull(text):
        return ""
    return (
        str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("*", "\\*")
    )


def _code(text) -> str:
    return str(text).replace("`", "'").replace("\n", " ")[:300]


def md_table(headers: list[str], rows: list[list[str]], align: str = "") -> str:
    """A GitHub Markdown table; align: one 'l' or 'r' per column (default: r but the first)."""
    align = align or "l" + "r" * (len(headers) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


# The full table's columns: (header, column or function of the row).
def _notes(r) -> str:
    notes = []
    if r["status"] != "ok" and not _isnull(r.get("reason")):
        notes.append(_esc(r["reason"]))
    if r.get("variant_kind") == "tuned" and not _isnull(r.get("tune_point")):
        notes.append("tuned: " + figures._point_label(r["tune_point"]))
    if _true(r.get("throttled")):
        notes.append(f"THROTTLED ({_esc(r.get('throttle_reasons')) or 'reason not recorded'})")
    if r.get("correct") is not None and not _isnull(r.get("correct")) and not bool(r["correct"]):
        notes.append("INCORRECT")
    if r["status"] == "ok" and not _isnull(r.get("converged")) and not bool(r["converged"]):
        notes.append("not converged (sample/time limit)")
    return "; ".join(notes)


FULL_COLUMNS: list[tuple[str, object]] = [
    ("variant", "variant"),
    ("size", "size"),
    ("status", "status"),
    ("median ms", "median_ms"),
    ("TFLOP/s", "tflops"),
    ("GB/s", "gbps"),
    ("% of baseline", "pct_of_baseline"),
    ("baseline ms", "baseline_median_ms"),
    ("n", "n_samples"),
    ("rse %", lambda r: r["rse_median"] * 100 if not _isnull(r["rse_median"]) else None),
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
            if header in ("variant", "size", "status", "notes"):
                cells.append(_esc(val) if val is not None else "")
            elif header == "n":
                cells.append(DASH if _isnull(val) else str(int(val)))
            else:
                cells.append(fmt(val))
        rows.append(cells)
    return rows


def full_table(data: StudyData, df: pd.DataFrame) -> str:
    heads = [h if h != "% of baseline" else f"% of {baseline_label(data)}" for h, _ in FULL_COLUMNS]
    return md_table(heads, table_rows(df), "lll" + "r" * (len(heads) - 4) + "l")


def _sorted_rows(data: StudyData, df: pd.DataFrame) -> pd.DataFrame:
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
            cols = logs.std().sort_values(ascending=False).dropna().index[:12].tolist()
        return wide[cols], size, "profile.parquet"
    return None, None, ""


def metric_deltas(data: StudyData, prev: str, cur: str, top: int = 6) -> tuple[list, str | None]:
    """The metrics that changed most (by ratio) from ``prev`` to ``cur``, with their values."""
    frames = []
    size = None
    roof = data.table("roofline")
    if roof is not None:
        size = profile_size(data, roof)
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
    keep = a.notna() & b.notna() & (a > 0) & (b > 0) & (a != b)
    ratio = (b[keep] / a[keep]).astype(float)
    out, seen = [], set()
    for name in np.abs(np.log(ratio)).sort_values(ascending=False).index:
        pair = (float(a[name]), float(b[name]))
        if pair in seen:  # the same quantity under its roofline and its ncu name
            continue
        seen.add(pair)
        out.append((name, *pair, float(ratio[name])))
        if len(out) == top:
            break
    return out, size


# ------------------------------------------------------------------------------------------
# Figures


def make_figures(
    data: StudyData, outdir: str | Path, study_figures: str | Path | None = None
) -> list[figures.Figure]:
    """Draw every standard figure the data allows; a figure it cannot draw says why."""
    import shutil

    figures.style()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    order = ladder_order(data)
    size = headline_size(data)
    base = baseline_label(data)
    fom = figure_of_merit(data)
    head = headline_rows(data)
    main = main_rows(data)
    out: list[figures.Figure] = []

    def attempt(name: str, title: str, fn):
        try:
            out.append(fn())
        except figures.NoData as e:
            out.append(figures.Figure(name, title, skipped=str(e)))

    attempt(
        "ladder",
        f"% of {base} per variant",
        lambda: figures.ladder(
            head,
            order,
            outdir,
            size_label=size,
            baseline_label=base,
            references=data.meta.get("references", []),
        ),
    )
    second = data.meta.get("second_headline")
    if second:
        rows = main[main["size"] == second].drop_duplicates("variant", keep="last")
        name = f"ladder_{second}"
        attempt(
            name,
            f"% of {base} per variant at {second}",
            lambda: figures.ladder(
                rows.set_index("variant", drop=False),
                order,
                outdir,
                size_label=second,
                baseline_label=base,
                name=name,
            ),
        )
    attempt(
        "sweep",
        "throughput against problem size",
        lambda: figures.sweep(main, order, outdir, metric=fom, baseline_label=base),
    )
    facets = _problem_attr(data, "sweep_facets", None)
    if facets:  # e.g. attention: against S, a panel per D and causal
        attempt(
            "sweep_facets",
            f"throughput against {facets[0]} per {', '.join(facets[1])}",
            lambda: figures.sweep_facets(
                main,
                order,
                outdir,
                x=facets[0],
                by=tuple(facets[1]),
                metric=fom,
                baseline_label=base,
            ),  # fmt: skip
        )

    def roof():
        r = data.table("roofline")
        if r is None:
            raise figures.NoData("no roofline table (roofline.parquet) for this study")
        s = profile_size(data, r)
        return figures.roofline(
            r[r["size"] == s].drop_duplicates("variant", keep="last"),
            order,
            outdir,
            ceil=figures.ceilings(data.table("device")),
            size_label=s,
            peak_kind=_problem_attr(data, "peak", "fp32"),  # fp32 or bf16_tensor
        )

    attempt("roofline", "Hierarchical roofline", roof)

    def heat():
        t, s, _ = metric_table(data)
        if t is None:
            raise figures.NoData("no profile or roofline table for this study")
        return figures.heatmap(t, outdir, size_label=s)

    attempt("metrics", "Profiler metrics per variant", heat)

    predicted = {
        v["id"]: float(v["predict"]["pct_of_baseline"])
        for v in data.meta.get("variants", [])
        if "pct_of_baseline" in (v.get("predict") or {})
    }
    measured = {v: _float(head.loc[v, "pct_of_baseline"]) for v in head.index}
    measured = {k: v for k, v in measured.items() if v is not None}
    attempt(
        "prediction",
        "Prediction against measurement",
        lambda: figures.prediction(
            predicted, measured, order, outdir, baseline_label=base, size_label=size
        ),
    )
    attempt(
        "distribution",
        "Sample distribution at the headline size",
        lambda: quality.distribution(
            data.measurements, data.table("samples"), order, outdir, size_label=size
        ),
    )
    attempt(
        "autotune",
        "Autotuning search",
        lambda: figures.autotune(
            candidate_rows(data), main[main["variant_kind"] == "tuned"], outdir, metric=fom
        ),
    )
    if study_figures is not None and Path(study_figures).is_dir():
        for f in figures.read_manifest(study_figures):
            if f.drawn:
                for name in filter(None, (f.png, f.svg)):
                    shutil.copy2(Path(study_figures) / name, outdir / name)
            out.append(f)
    return out


# ------------------------------------------------------------------------------------------
# The page


def _figure_md(f: figures.Figure, prefix: str = "figures") -> str:
    if not f.drawn:
        return f"*{f.title}: not drawn: {f.skipped}.*"
    img = f"![{f.title}]({prefix}/{f.png})"
    link = f"[{img}]({prefix}/{f.svg})" if f.svg else img
    return f"{link}\n\n*{f.caption}*" if f.caption else link


def render_markdown(
    data: StudyData,
    figs: list[figures.Figure],
    stale: list[dict] | None = None,
    figures_prefix: str = "figures",
) -> str:
    meta = data.meta
    order = ladder_order(data)
    size = headline_size(data)
    base = baseline_label(data)
    fom = figure_of_merit(data)
    unit = "TFLOP/s" if fom == "tflops" else "GB/s"
    head = headline_rows(data)
    prov = provenance(data)
    byname = {f.name: f for f in figs}
    s = summary(data)
    L: list[str] = []
    L.append(f"# {meta.get('title') or data.study}")
    L.append("")
    if meta.get("question"):
        L.append(f"**Question.** {meta['question']}")
        L.append("")
    L += failures_section(data)
    if data.mode == "replay":
        L.append(
            f"> **Rendered from published data measured on {s['measured_from']}"
            + (f" to {s['measured_to']}" if s["measured_to"] != s["measured_from"] else "")
            + f" on an {prov['GPU']}, not re-measured here.** The tables are in `data/` of "
            f"this study's published folder."
        )
        L.append("")
    if s["best"]:
        b = s["best"]
        L.append(
            f"**Answer at {size}.** The best variant, **{b['variant']}**, reaches "
            f"**{fmt(b['pct_of_baseline'])} % of {base}** ({fmt(b.get(fom))} {unit} against "
            f"{fmt(b.get(f'baseline_{fom}'))} {unit})"
            + (
                f" and **{fmt(b['pct_of_copy'])} % of a device copy** of the same bytes "
                "timed beside it."
                if b.get("pct_of_copy") is not None
                else "."
            )
        )
        L.append("")
        L += _extra_baselines_lines(head, b["variant"], fom, unit)

    L.append("## Provenance")
    L.append("")
    L.append(md_table(["", ""], [[k, _esc(v)] for k, v in prov.items()], "ll"))
    L.append("")
    L.append("How to regenerate:")
    L.append("")
    L.append("```sh\n" + regenerate_commands(data) + "\n```")
    L.append("")

    L.append("## Read this first")
    L.append("")
    notes = attention(data, stale)
    if notes:
        L += [f"- {n}" for n in notes]
    else:
        L.append(
            "Nothing to flag: every measurement passed its correctness check, none was "
            "skipped, failed, throttled or stopped before converging."
        )
    L.append("")

    L.append(f"## The ladder at {size}")
    L.append("")
    if "ladder" in byname:
        L.append(_figure_md(byname["ladder"], figures_prefix))
        L.append("")
    L.append(_ladder_table(data, order, head, base, unit, fom))
    L.append("")

    L += quality.spread_section(data.measurements, base, fmt)

    L.append("## Step by step")
    L.append("")
    prev = None
    for v in order:
        L += _variant_section(data, v, prev, head, base, unit, fom)
        if v in head.index and head.loc[v, "status"] == "ok":
            prev = v

    others = [f for f in figs if f.name != "ladder"]
    if others:
        L.append("## Figures")
        L.append("")
        for f in others:
            if f.drawn:
                L.append(f"### {f.title}")
                L.append("")
            L.append(_figure_md(f, figures_prefix))
            L.append("")

    L += quality.stages_section(data.table("stages"), fmt)

    L.append("## All measurements")
    L.append("")
    L.append(
        f"Every (variant, size) row of the measurements table: medians over n timed launches "
        f"(rse: relative standard error of the median), {base} timed beside each one. "
        f"Skipped and failed rows keep their reason."
    )
    L.append("")
    L.append(full_table(data, _sorted_rows(data, main_rows(data))))
    L.append("")
    cand = candidate_rows(data)
    if len(cand):
        L.append("## Autotuning candidates")
        L.append("")
        L.append(
            f"{len(cand)} rows: every candidate at every size it was benched at, fastest first "
            "per size."
        )
        L.append("")
        order_sz = {x: i for i, x in enumerate(sizes_by_flop(data.measurements))}
        cand = cand.assign(_s=cand["size"].map(order_sz)).sort_values(
            ["tuned_from", "_s", "median_ms"], kind="stable", na_position="last"
        )
        L.append(full_table(data, cand.drop(columns="_s")))
        L.append("")
    return "\n".join(L).rstrip() + "\n"


def _ladder_table(data, order, head, base, unit, fom) -> str:
    # bandwidth studies also show the variant against a device copy of the same bytes
    copy = fom == "gbps" and "pct_of_copy" in head
    rows = []
    prev_ms = None
    for v in order:
        info = variant_info(data, v)
        pred = (info.get("predict") or {}).get("pct_of_baseline")
        if v not in head.index:
            rows.append(
                [v, "not measured", DASH, DASH, DASH, *([DASH] if copy else []), fmt(pred), DASH]
            )
            continue
        r = head.loc[v]
        ms = _float(r["median_ms"])
        step = fmt(prev_ms / ms) if (prev_ms and ms) else DASH
        rows.append(
            [
                v,
                r["status"] + (" (throttled)" if _true(r.get("throttled")) else ""),
                fmt(r["median_ms"]),
                fmt(r.get(fom)),
                fmt(r["pct_of_baseline"]),
                *([fmt(r.get("pct_of_copy"))] if copy else []),
                fmt(pred),
                step,
            ]
        )
        if r["status"] == "ok" and ms:
            prev_ms = ms
    heads = ["variant", "status", "median ms", unit, f"% of {base}"]
    heads += ["% of copy"] if copy else []
    heads += ["predicted %", "x previous"]
    return md_table(heads, rows, "ll" + "r" * (len(heads) - 2))


def _variant_section(data, v, prev, head, base, unit, fom) -> list[str]:
    info = variant_info(data, v)
    L = [f"### {v}", ""]
    if info.get("says"):
        L += [f"**What changed.** {info['says']}", ""]
    if info.get("header"):
        src = info.get("source") or ""
        L += [f"From `{src}`:" if src else "From the kernel file:", ""]
        L += ["```text", info["header"], "```", ""]
    if info.get("tuned"):
        space = info.get("tune_space") or {}
        dims = ", ".join(f"{k} in {vals}" for k, vals in space.items())
        meas = data.measurements
        conf = (
            meas[(meas["variant"] == v) & meas["selected_median_ms"].notna()]
            if "selected_median_ms" in meas.columns
            else meas.iloc[:0]
        )
        if len(conf):
            bias = ", ".join(
                f"{r['size']}: {r['selected_median_ms']:.4g} ms in its tuning job, "
                f"{r['median_ms']:.4g} ms again"
                for _, r in conf.iterrows()
            )
            picked = (
                f"; at {', '.join(info['tune_sizes'])} the fastest correct candidate wins and "
                "is timed again in the variant's own job, and that re-timing is the variant's "
                f"row, so the pick of the best of many does not favour a lucky sample ({bias})"
            )
        else:
            picked = (
                f"; at {', '.join(info['tune_sizes'])} the fastest correct candidate is the "
                "variant's row"
            )
        L += [
            f"**Autotuned** over {len(info.get('candidates', []))} candidates"
            + (f" ({dims})" if dims else "")
            + (
                f"{picked}, and at the other sizes the winner at {info['sweep_pick']} runs."
                if info.get("sweep_pick")
                else (
                    f"{picked}."
                    if len(conf)
                    else "; at each size the fastest correct candidate is the variant's row."
                )
            ),
            "",
        ]
    r = head.loc[v] if v in head.index else None
    size = headline_size(data)
    pred = info.get("predict") or {}
    if pred:
        parts = []
        for key, p in pred.items():
            got = _float(r.get(key)) if r is not None and key in r.index else None
            label = f"% of {base}" if key == "pct_of_baseline" else key
            if got is None:
                parts.append(f"{fmt(p)} {label} (not measured)")
            else:
                parts.append(f"{fmt(p)} {label}, measured {fmt(got)} ({fmt(got / p, 3)}x)")
        L += ["**Prediction.** " + "; ".join(parts) + ".", ""]
    if r is not None and _float(r.get("predicted_ms")) is not None:
        # the three-term model (kernelbook.report.regimes), from the device table
        got = _float(r.get("median_ms"))
        L += [
            f"**Model at {size}.** {fmt(r['predicted_ms'])} ms, {r.get('predicted_bound')}-bound"
            + (f"; measured {fmt(got)} ms ({fmt(got / r['predicted_ms'], 3)}x)" if got else "")
            + ".",
            "",
        ]
    if r is None:
        L += [f"**Measurement.** Not measured at {size}.", ""]
    elif r["status"] != "ok":
        L += [f"**Measurement at {size}.** {r['status']}: {_esc(r.get('reason'))}", ""]
    else:
        line = (
            f"**Measurement at {size}.** median {fmt(r['median_ms'])} ms "
            f"(n {int(r['n_samples'])}, rse {fmt(r['rse_median'] * 100)} %), "
            f"{fmt(r.get(fom))} {unit}, **{fmt(r['pct_of_baseline'])} % of {base}** "
            f"({base} {fmt(r['baseline_median_ms'])} ms), rel err {fmt(r['rel_err'])}"
        )
        if prev is not None and prev in head.index:
            p_ms = _float(head.loc[prev, "median_ms"])
            if p_ms:
                line += f"; {fmt(p_ms / float(r['median_ms']), 3)}x the speed of {prev}"
        if _true(r.get("throttled")):
            line += f". **Measured while THROTTLED** ({_esc(r.get('throttle_reasons'))})"
        if r.get("variant_kind") == "tuned" and not _isnull(r.get("tune_point")):
            line += f". Winner here: {figures._point_label(r['tune_point'])}"
        L += [line + ".", ""]
    if prev is not None:
        deltas, psize = metric_deltas(data, prev, v)
        if deltas:
            L += [f"**Profiler, against {prev}** (at {psize}; largest changes by ratio):", ""]
            L.append(
                md_table(
                    ["metric", prev, v, "ratio"],
                    [[_esc(n), fmt(a), fmt(b), fmt(q, 3) + "x"] for n, a, b, q in deltas],
                    "lrrr",
                )
            )
            L.append("")
    L += _resources(data, v, r)
    L += _sanitizer(data, v, r)
    return L


def _build_row(data: StudyData, v: str, r) -> pd.Series | None:
    build = data.table("build")
    if build is None:
        return None
    # a tuned variant's row is its winning candidate's: find that candidate's build
    if r is not None and not _isnull(r.get("tune_point")):
        hit = build[build["variant"] == candidate_id(v, r["tune_point"])]
        if len(hit):
            return hit.iloc[-1]
    hit = build[build["variant"] == v]
    if len(hit):
        return hit.iloc[-1]
    if r is not None and not _isnull(r.get("cubin_sha256")):
        hit = build[build["cubin_sha256"] == r["cubin_sha256"]]
        if len(hit):
            return hit.iloc[-1]
    return None


def candidate_id(tuned: str, tune_point: str) -> str:
    """The candidate id of a tuning point (kernelbook.config names them so)."""
    from kernelbook.config import CANDIDATE_SEP

    point = json.loads(tune_point)
    return tuned + CANDIDATE_SEP + "_".join(f"{k}{val}" for k, val in point.items())


def _resources(data, v, r) -> list[str]:
    b = _build_row(data, v, r)
    if b is None:
        return []
    if b.get("status") == "failed":
        return [f"**Build failed** ({b['variant']}): `{_code(str(b['reason'])[:600])}`", ""]
    spill = int(b["spill_store_bytes"]) + int(b["spill_load_bytes"])
    text = (
        f"**Resources** ({b['variant']}): {int(b['registers'])} registers/thread, "
        f"{int(b['smem_static_bytes'])} B static shared memory, "
        f"{int(b['spill_store_bytes'])} B spill stores / {int(b['spill_load_bytes'])} B spill "
        f"loads, {int(b['stack_bytes'])} B stack, {int(b['sass_instructions'])} SASS "
        "instructions."
    )
    if spill:
        text += " **Spills registers.**"
    if r is not None and not _isnull(r.get("smem_dynamic_bytes")) and r["smem_dynamic_bytes"]:
        text += f" Dynamic shared memory at launch: {int(r['smem_dynamic_bytes'])} B."
    return [text, ""]


def _sanitizer(data, v, r) -> list[str]:
    san = data.table("sanitizer")
    if san is None:
        return []
    sub = san[san["variant"] == v]
    if sub.empty and r is not None and not _isnull(r.get("tune_point")):
        sub = san[san["variant"] == candidate_id(v, r["tune_point"])]
    if sub.empty:
        return ["**Sanitizer.** Not run for this variant.", ""]
    parts = []
    for _, s in sub.iterrows():
        if s["verdict"] == "clean":
            parts.append(f"{s['tool']} clean")
        else:
            part = (
                f"{s['tool']} **{s['verdict']}** ({s['errors']} errors, {s['warnings']} warnings)"
            )
            if not _isnull(s["first_finding"]):
                part += f": `{_code(s['first_finding'])}`"
            parts.append(part)
    sizes = ", ".join(dict.fromkeys(sub["size"]))
    return [f"**Sanitizer** (at {sizes}): " + "; ".join(parts) + ".", ""]


# ------------------------------------------------------------------------------------------
# HTML


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;
margin:2em auto;padding:0 1em;line-height:1.45;color:#1b1b1b}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0 1em}
th,td{border:1px solid #ccc;padding:.2em .5em}th{background:#f3f3f3}
tr:nth-child(even) td{background:#fafafa}
pre{background:#f6f8fa;padding:.7em;overflow-x:auto;font-size:.85em}
code{font-size:.9em}img{max-width:100%}
blockquote{border-left:4px solid #d9822b;margin:0;padding:.2em 1em;background:#fff7ef}
h1{border-bottom:2px solid #333}h2{border-bottom:1px solid #ccc;margin-top:2em}
"""


def markdown_to_html(md_text: str, base: str | Path, title: str, embed: bool = True) -> str:
    """A standalone HTML page; PNGs are embedded so that the file travels alone."""
    import markdown

    body = markdown.markdown(
        md_text, extensions=["tables", "fenced_code", "toc", "sane_lists"], output_format="html"
    )
    if embed:
        base = Path(base)

        def inline(m: re.Match) -> str:
            src = html.unescape(m.group(1))
            p = base / src
            if p.suffix != ".png" or not p.is_file():
                return m.group(0)
            data = base64.b64encode(p.read_bytes()).decode()
            return f'src="data:image/png;base64,{data}"'

        body = re.sub(r'src="([^"]+)"', inline, body)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"{body}\n</body>\n</html>\n"
    )


def write(
    data: StudyData,
    figs: list[figures.Figure],
    md_path: str | Path,
    html_path: str | Path | None = None,
    stale: list[dict] | None = None,
) -> str:
    """Write worklog.md (and worklog.html); figures are linked as figures/<name> beside it."""
    md_path = Path(md_path)
    md = render_markdown(data, figs, stale)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(md)
    if html_path is not None:
        title = data.meta.get("title") or data.study
        Path(html_path).write_text(markdown_to_html(md, md_path.parent, title))
    return md


def render(
    paths: Mapping[str, str | Path],
    outdir: str | Path,
    mode: str = "measured",
    study_figures: str | Path | None = None,
    stale: list[dict] | None = None,
) -> tuple[StudyData, list[figures.Figure]]:
    """What the notebook does, in one call: <outdir>/worklog.md, worklog.html, figures/."""
    outdir = Path(outdir)
    data = load(paths, mode=mode)
    figs = make_figures(data, outdir / "figures", study_figures=study_figures)
    write(data, figs, outdir / "worklog.md", outdir / "worklog.html", stale=stale)
    return data, figs


# ------------------------------------------------------------------------------------------
# Reading the page back (tests, and anyone checking a published page against its data)


def parse_tables(md_text: str) -> list[list[dict[str, str]]]:
    """Every Markdown table of a page, as lists of {header: cell}."""
    out, cur, heads = [], None, None
    for line in md_text.splitlines():
        if line.startswith("|") and line.rstrip().endswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if heads is None:
                heads, cur = cells, []
            elif all(re.fullmatch(r":?-+:?", c) for c in cells):
                continue
            else:
                cur.append(dict(zip(heads, cells, strict=False)))
        elif heads is not None:
            out.append(cur)
            cur, heads = None, None
    if heads is not None:
        out.append(cur)
    return out


# ------------------------------------------------------------------------------------------
# python -m kernelbook.report.worklog meta STUDY --out FILE   (the study_meta rule)


def main(argv=None) -> int:
    from kernelbook import config as cfg

    p = argparse.ArgumentParser(prog="python -m kernelbook.report.worklog")
    p.add_argument("--configfile", default="config/config.yaml")
    p.add_argument("--settings", help="JSON overriding keys of the config file")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("meta", help="write study.json: what a worklog needs from the config")
    s.add_argument("study")
    s.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        overrides = json.loads(args.settings) if args.settings else None
        project = cfg.load_project_file(args.configfile, overrides=overrides)
        study = project.study(args.study)
        write_meta(study, project.root, args.out)
    except cfg.ConfigError as e:
        print(f"kernelbook: error: {e}", file=sys.stderr)
        return 1
    print(f"{args.study}: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

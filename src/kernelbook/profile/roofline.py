"""The roofline table: work, traffic and arithmetic intensity per (variant, size) from the
profile table, and the ceiling that bounds each."""

from __future__ import annotations

import math

import pandas as pd

from kernelbook import tables
from kernelbook.profile.ncu import (
    FLOP_METRICS,
    LDSM_CONFLICTS,
    STALL_PREFIX,
    STALL_SUFFIX,
    TENSOR_PIPE_METRICS,
    profiled,
)


def _metric(wide: pd.Series, name: str) -> float:
    v = wide.get(name)
    return float(v) if v is not None and not pd.isna(v) else math.nan


def _div(a: float, b: float) -> float | None:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else None


# the device table's compute peak per roofline kind (Problem.peak)
PEAK_KEYS = {"fp32": "fp32_peak_tflops", "bf16_tensor": "bf16_tensor_peak_tflops"}


def ceilings(device: pd.DataFrame, peak: str = "fp32") -> dict[str, float]:
    """Bandwidth ceilings and the compute peak of this kind (as ``compute_peak_tflops``)."""
    q = tables.device_values(device)
    out = {
        k: q[k]
        for k in ("copy_gbps", "l2_gbps", "l1_gbps", "fp32_peak_tflops", "cublas_fp32_tflops")
        if k in q
    }
    if PEAK_KEYS[peak] in q:
        out["compute_peak_tflops"] = q[PEAK_KEYS[peak]]
    return out


def bound(ai: dict[str, float | None], ceil: dict[str, float]) -> str | None:
    """The ceiling that limits attainable FLOP/s at these intensities (lowest roof)."""
    roofs = {}
    peak = ceil.get("compute_peak_tflops", ceil.get("fp32_peak_tflops"))
    if peak:
        roofs["compute"] = peak * 1e3  # GFLOP/s
    for level, key in (("dram", "copy_gbps"), ("l2", "l2_gbps"), ("l1", "l1_gbps")):
        if key in ceil and ai.get(level):
            roofs[level] = ceil[key] * ai[level]
    return min(roofs, key=roofs.get) if roofs else None


def roofline(
    profile: pd.DataFrame,
    measurements: pd.DataFrame | None,
    device: pd.DataFrame | None,
    size_names: tuple[str, ...],
    flop_expected,
    tensor_flops: bool = False,
) -> pd.DataFrame:
    """One row per (variant, size) of the profile table: work, traffic, intensities, bounds.

    ``tensor_flops``: the work may be done on tensor cores, which ncu's per-instruction FLOP
    counters do not see; the FLOPs are then the larger of what they count (a SIMT kernel's
    FFMAs) and the model's (``flop_expected``).
    """
    kind = "bf16_tensor" if tensor_flops else "fp32"
    ceil = ceilings(device, kind) if device is not None else {}
    out = []
    profile = profiled(profile)
    for (study, variant, size), grp in profile.groupby(["study", "variant", "size"], sort=False):
        wide = grp.set_index("metric")["value"]
        first = grp.iloc[0]
        sizes = {n: int(first[n]) for n in size_names}
        flop = sum(_metric(wide, m) * w for m, w in FLOP_METRICS.items() if m in wide.index)
        if tensor_flops:  # a SIMT step's FFMAs are counted, a tensor step's MMAs are not
            flop = max(flop, float(flop_expected(sizes)))
        dram = _metric(wide, "dram__bytes_read.sum") + _metric(wide, "dram__bytes_write.sum")
        l2, l1 = _metric(wide, "lts__t_bytes.sum"), _metric(wide, "l1tex__t_bytes.sum")
        t_ms = _metric(wide, "gpu__time_duration.sum") / 1e6
        ai = {"dram": _div(flop, dram), "l2": _div(flop, l2), "l1": _div(flop, l1)}
        stalls = {
            m[len(STALL_PREFIX) : -len(STALL_SUFFIX)]: float(v)
            for m, v in wide.items()
            if m.startswith(STALL_PREFIX)
            and m.endswith(STALL_SUFFIX)
            and not pd.isna(v)
            and m[len(STALL_PREFIX) : -len(STALL_SUFFIX)] != "selected"
        }
        top = max(stalls, key=stalls.get) if stalls else None
        pipes = [_metric(wide, m) for m in TENSOR_PIPE_METRICS if m in wide.index]
        pipes = [p for p in pipes if not pd.isna(p)]
        hmma = _metric(wide, "sm__inst_executed_pipe_tensor_op_hmma.sum")
        hgmma = _metric(wide, "sm__inst_executed_pipe_tensor_op_gmma.sum")
        tensor = any(x > 0 for x in (hmma, hgmma) if not math.isnan(x))
        hmma, hgmma = (None if math.isnan(x) else x for x in (hmma, hgmma))
        event = None
        if measurements is not None and len(measurements):
            hit = measurements[
                (measurements["variant"] == variant)
                & (measurements["size"] == size)
                & (measurements["status"] == "ok")
            ]
            if len(hit):
                event = float(hit["median_ms"].iloc[0])
        sec = t_ms / 1e3
        out.append(
            {
                "study": study,
                "variant": variant,
                **sizes,
                "size": size,
                "flop": flop,
                "flop_expected": float(flop_expected(sizes)),
                "dram_bytes": dram,
                "l2_bytes": l2,
                "l1_bytes": l1,
                "ncu_time_ms": t_ms,
                "ai_dram": ai["dram"],
                "ai_l2": ai["l2"],
                "ai_l1": ai["l1"],
                "tflops": _div(flop, sec * 1e12),
                "dram_gbps": _div(dram, sec * 1e9),
                "l2_gbps": _div(l2, sec * 1e9),
                "l1_gbps": _div(l1, sec * 1e9),
                "event_median_ms": event,
                "event_over_ncu": _div(event, t_ms) if event else None,
                "sm_throughput_pct": _metric(
                    wide, "sm__throughput.avg.pct_of_peak_sustained_elapsed"
                ),
                "memory_throughput_pct": _metric(
                    wide, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
                ),
                "achieved_occupancy_pct": _metric(
                    wide, "sm__warps_active.avg.pct_of_peak_sustained_active"
                ),
                "registers_per_thread": _metric(wide, "launch__registers_per_thread"),
                "smem_bank_conflicts_ld": _metric(
                    wide, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
                ),
                "smem_bank_conflicts_st": _metric(
                    wide, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
                ),
                "global_ld_sectors_per_request": _div(
                    _metric(wide, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
                    _metric(wide, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
                ),
                "global_st_sectors_per_request": _div(
                    _metric(wide, "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
                    _metric(wide, "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
                ),
                "smem_bank_conflicts_ldsm": _metric(wide, LDSM_CONFLICTS),
                "tensor_pipe_pct": max(pipes) if pipes else None,
                "hmma_inst": hmma if tensor else None,
                "hgmma_inst": hgmma if tensor else None,
                "top_stall": top,
                "top_stall_ratio": stalls.get(top) if top else None,
                # no FLOPs (a copy, a transpose): no FLOP roofline to be bound by
                "bound": bound(ai, ceil) if flop > 0 else None,
                "gpu_name": first["gpu_name"],
                "gpu_uuid": first["gpu_uuid"],
            }
        )
    return pd.DataFrame(out)

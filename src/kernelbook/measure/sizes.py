"""One size of a bench job, timed: its set-up (prepare_size: inputs, launch, baselines and
the bandwidth reference beside it) apart from its sampling (time_prepared).

A bench job prepares the sizes it can keep on the device while it holds the GPU shared, with
its checks; only the sampling needs the GPU alone (kernelbook.gpu.switch_mode).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

from kernelbook import provenance
from kernelbook.launch.kernel import Crash, DeviceFault, device_sm_count


def _dims(d) -> str:
    return ",".join(str(x) for x in d)


def memcpy_launcher(cp, dst, src, nbytes: int, stream_ptr: int):
    """One device-to-device cudaMemcpyAsync of ``nbytes`` from ``src`` to ``dst`` on the
    stream: the copy ceiling (the bench's baseline of a bandwidth study, the device table's
    copy_gbps)."""
    d2d = cp.cuda.runtime.memcpyDeviceToDevice
    ptrs = (dst.data.ptr, src.data.ptr)

    def run():
        cp.cuda.runtime.memcpyAsync(ptrs[0], ptrs[1], nbytes, d2d, stream_ptr)

    run.buffers = (src, dst)  # keep them alive as long as the launcher
    return run


def copy_launcher(b, nbytes: float):
    """A device-to-device copy that reads and writes ``nbytes`` in all: the ceiling a
    bandwidth-bound kernel is compared with, at its own byte count, in its own job."""
    cp = b.cp
    half = max(256, int(nbytes // 2) // 256 * 256)
    src = cp.empty(half, dtype=cp.uint8)
    src.fill(1)
    return memcpy_launcher(cp, cp.empty_like(src), src, half, b.stream.ptr)


def read_launcher_of(b, nbytes: float):
    """A streaming read of ``nbytes`` (kernelbook.measure.microbench's dram_read): the ceiling
    of a kernel that only reads, a decode GEMV streaming its weights, in its own job."""
    from kernelbook.measure import microbench

    return microbench.read_launcher(b.cp, int(nbytes), device_sm_count(), b.stream.ptr)


def sample_instruments(st) -> list[dict]:
    """Each sample of one function's Stats as the samples table's instrument columns: ms
    (by the measurement's instrument), event_ms, kernel_span_ms, kernel_sum_ms and kernels
    (empty where the instrument has none: host has no events and no kernels), batch_calls
    (host only)."""
    n = len(st.samples)
    events = st.events or (None,) * n
    sums = st.kernel_sums or (None,) * n
    counts = st.kernel_counts or (None,) * n
    return [
        {
            "ms": ms,
            "timing_method": st.method,
            "event_ms": ev,
            "kernel_span_ms": ms if st.method == "cupti" else None,
            "kernel_sum_ms": ks,
            "kernels": None if kc is None else int(round(kc)),
            "batch_calls": st.batch_calls,
        }
        for ms, ev, ks, kc in zip(st.samples, events, sums, counts, strict=True)
    ]


def sample_rows(b, variant, label: str, stats) -> list[dict]:
    rows = []
    for fn, st in stats.items():
        clocks = b.sampler.sm_clock_at(st.times)
        rows += [
            {
                "study": b.study.name,
                "variant": variant.id,
                "job": variant.id,  # a tuned variant's job relabels its own (measure.job)
                "size": label,
                "function": fn,
                "sample": i,
                **cols,
                "sm_clock_mhz": clk,
                "gpu_uuid": b.provenance["gpu_uuid"],
            }
            for i, (cols, clk) in enumerate(zip(sample_instruments(st), clocks, strict=True))
        ]
    return rows


def instrument_columns(v, bl) -> dict:
    """A measurements row's instrument columns from the variant's and the baseline's Stats:
    which instrument made median_ms (and why not CUPTI, where it is events), the second
    instrument's medians (events: empty for host), CUPTI's kernel sums and counts (empty but
    for cupti), and a host batch's calls (empty but for host)."""
    return {
        "timing_method": v.method,
        "timing_note": v.note,
        "event_median_ms": v.event_median,
        "kernel_sum_median_ms": v.kernel_sum_median,
        "kernels_per_call": v.kernels_per_call,
        "baseline_event_median_ms": bl.event_median,
        "baseline_kernel_sum_median_ms": bl.kernel_sum_median,
        "baseline_kernels_per_call": bl.kernels_per_call,
        "batch_calls": v.batch_calls,
        "baseline_batch_calls": bl.batch_calls,
    }


def _finite(x: float) -> float | None:
    """``x``, or None for NaN (JSON has no NaN: a host row has no event median)."""
    return None if math.isnan(x) else x


def _beside(st) -> str:
    """What the log shows beside a median: the events, or a host batch's calls."""
    if st.batch_calls is not None:
        return f"{st.batch_calls} calls a batch"
    return f"events {st.event_median:.4f}"


@dataclass
class Prepared:
    """A size set up for its timing: its case, launch, baselines and bandwidth reference."""

    case: object
    launch: object
    base: object
    fns: dict  # the functions timed side by side: variant, baseline, baseline:<n>, copy
    extras: dict = field(default_factory=dict)
    unavailable: dict = field(default_factory=dict)
    parts: dict = field(default_factory=dict)  # where the set-up's seconds went
    setup_s: float = 0.0


def prepare_size(b, kernel, variant, s, checked, kept=None) -> Prepared:
    """Size ``s`` set up for its timing, on the case its check ran (``kept``), or on the
    same seeded inputs made again: the launch, the baselines (each checked against the
    check's float64 reference) and the bandwidth reference timed beside it."""
    study, problem = b.study, b.problem
    _, _, reference = checked
    where = b.where(variant, s)
    began = time.monotonic()
    if kept is not None:
        case = kept
        case.reset()  # its outputs as a fresh set-up leaves them
    else:
        case = problem.setup(
            s,
            study.dtype,
            study.params,
            b.project.settings["seed"],
            reference=False,
            computes=variant.computes,
        )
    run, launch = b.launcher(kernel, variant, s, case)
    # the check's reference comes back instead of a second float64 computation
    case.reference = {k: b.cp.asarray(v) for k, v in reference.items()}
    # where the set-up goes, for the log
    parts = {"inputs kept" if kept is not None else "inputs": time.monotonic() - began}

    def part(name, since):
        parts[name] = time.monotonic() - since

    t = time.monotonic()
    base = problem.baseline(case, study.baseline, study.params)
    part(study.baseline, t)
    _, nbytes = problem.cost(s, study.dtype, variant.computes, study.params)
    fns = {"variant": run, "baseline": base.run}
    extras, unavailable = {}, {}
    for n in study.extra_baselines:  # one that cannot run here is named, not fatal
        t = time.monotonic()
        try:
            extras[n] = problem.baseline(case, n, study.params)
        except Exception as e:  # noqa: BLE001 - a library refusing a shape, say
            unavailable[n] = {"error": f"{type(e).__name__}: {e}"[:500]}
            b.log(f"{where}: baseline {n} not timed: {unavailable[n]['error']}")
        part(n, t)
    fns.update({"baseline:" + n: e.run for n, e in extras.items()})
    if study.figure_of_merit == "gbps":  # the same bytes copied, or read, beside it
        t = time.monotonic()
        ceiling = read_launcher_of if study.bandwidth_reference == "read" else copy_launcher
        fns["copy"] = ceiling(b, nbytes)
        part(study.bandwidth_reference, t)
    return Prepared(case, launch, base, fns, extras, unavailable, parts, time.monotonic() - began)


def prepared_bytes(case, reference: dict, study, nbytes: float) -> int:
    """What preparing a kept case adds on the device, about: its float64 ``reference``
    back, the baselines' outputs and the bandwidth reference's buffers."""
    held = sum(int(v.nbytes) for v in reference.values())
    outputs = sum(int(g.full.nbytes) for g in case.outputs.values())
    held += outputs * (1 + len(study.extra_baselines))
    if study.figure_of_merit == "gbps":
        held += int(nbytes)
    return held


def time_prepared(b, kernel, variant, s, p: Prepared, checked, blank, samples=None) -> dict:
    """The row of size ``s``, sampled on its prepared set-up (``p``); a kernel's launch set
    up again (another size's set-up since changed its dynamic shared memory allowance), a
    torch variant's kept (its set-up may compile or capture a graph)."""
    study, problem = b.study, b.problem
    result = checked[0]
    where = b.where(variant, s)
    began = time.monotonic()
    if kernel.kind == "torch":
        run, launch = p.fns["variant"], p.launch
    else:
        run, launch = b.launcher(kernel, variant, s, p.case)
    fns = {**p.fns, "variant": run}
    base, extras, unavailable, parts = p.base, p.extras, p.unavailable, p.parts
    flop, nbytes = problem.cost(s, study.dtype, variant.computes, study.params)
    dropped = b.timer.dropped
    sampling = time.monotonic()
    try:
        with b.sampler:
            stats = b.timer.measure(fns, where)
    except DeviceFault as e:
        raise Crash(str(e)) from None
    # where a size's timing_s goes: inputs and baselines (their checks) against the samples
    took = time.monotonic() - sampling
    rounds = max(st.n for st in stats.values())
    spent = (
        f"set-up {p.setup_s + sampling - began:.2f} s ("
        + ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
        + f"), sampling {took:.2f} s: {rounds} rounds of {len(fns)}, "
        f"{took / rounds * 1e3:.1f} ms a round"
    )
    env = b.sampler.summary()
    if samples is not None:
        samples += sample_rows(b, variant, problem.label(s), stats)
    v, bl = stats["variant"], stats["baseline"]
    row = blank(s, "ok", None)
    row.update(instrument_columns(v, bl), sampling_s=took)
    row.update(
        median_ms=v.median,
        q1_ms=v.q1,
        q3_ms=v.q3,
        min_ms=v.min,
        max_ms=v.max,
        mean_ms=v.mean,
        rel_std=v.rel_std,
        rse_median=v.rse_median,
        n_samples=v.n,
        converged=v.converged,
        stop_reason=v.stop_reason,
        dropped_samples=b.timer.dropped - dropped,
        tflops=flop / (v.median * 1e-3) / 1e12,
        gbps=nbytes / (v.median * 1e-3) / 1e9,
        baseline_mode=base.mode,
        baseline_median_ms=bl.median,
        baseline_q1_ms=bl.q1,
        baseline_q3_ms=bl.q3,
        baseline_n_samples=bl.n,
        baseline_min_ms=bl.min,
        baseline_max_ms=bl.max,
        baseline_rse_median=bl.rse_median,
        baseline_tflops=flop / (bl.median * 1e-3) / 1e12,
        baseline_gbps=nbytes / (bl.median * 1e-3) / 1e9,
        baseline_rel_err=base.rel_err,
        pct_of_baseline=100.0 * bl.median / v.median,
        correct=True,
        rel_err=result.rel_err,
        max_err=result.max_err,
        grid=_dims(launch.grid) if launch else None,
        block=_dims(launch.block) if launch else None,
        smem_dynamic_bytes=launch.smem if launch else None,
        measured_at=provenance.now(),
        **env,
    )
    if extras or unavailable:
        row["extra_baselines"] = json.dumps(
            unavailable
            | {
                n: {
                    "mode": e.mode,
                    "median_ms": stats["baseline:" + n].median,
                    "event_median_ms": _finite(stats["baseline:" + n].event_median),
                    "kernels_per_call": stats["baseline:" + n].kernels_per_call,
                    "tflops": flop / (stats["baseline:" + n].median * 1e-3) / 1e12,
                    "gbps": nbytes / (stats["baseline:" + n].median * 1e-3) / 1e9,
                    "rel_err": e.rel_err,
                    "pct": 100.0 * stats["baseline:" + n].median / v.median,
                }
                for n, e in extras.items()
            }
        )
    if "copy" in stats:
        cp_ms = stats["copy"].median
        copy_gbps = nbytes / (cp_ms * 1e-3) / 1e9
        row.update(
            copy_median_ms=cp_ms,
            copy_gbps=copy_gbps,
            pct_of_copy=100.0 * row["gbps"] / copy_gbps,
            copy_kind=study.bandwidth_reference,
        )
    flag = " THROTTLED " + env["throttle_reasons"] if env["throttled"] else ""
    b.log(
        f"{where}: {v.median:.4f} ms {v.method} ({_beside(v)}; "
        f"{row['tflops']:.2f} TFLOP/s, n={v.n}, {v.stop_reason}), "
        f"{study.baseline} {bl.median:.4f} ms ({_beside(bl)}, "
        f"{bl.kernels_per_call or '-'} kernels) -> {row['pct_of_baseline']:.1f} %"
        + "".join(f", {n} {stats['baseline:' + n].median:.4f} ms" for n in extras)
        + f" [{spent}]"
        + flag
        + (f" [{v.note}]" if v.note else "")
    )
    return row

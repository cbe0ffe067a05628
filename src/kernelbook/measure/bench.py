"""Check, then time, one variant over its sizes with its baseline side by side.

Every size is checked against the float64 reference before anything is timed: a wrong,
non-finite, out-of-bounds, crashing or hanging kernel gets a message that names the study,
variant and size, and no time of it is recorded. Sizes a variant's ``requires`` rule out
are kept as ``skipped`` rows with the failed condition.

With ``tolerate_failure`` (the pipeline's jobs) a failure becomes ``failed`` rows, with the
kind in ``failure`` (kernelbook.gate.FAILURE_KINDS) and the message in ``reason``: a wrong
result fails its size and the other sizes are still checked; a crash or a hang leaves the
device unusable, so the sizes not yet done fail with it. Without, the first failure raises.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable

from kernelbook import gpu, problems, provenance, tables
from kernelbook.build.job import BuildInfo
from kernelbook.config import Project, Study, Variant
from kernelbook.launch.kernel import (
    Crash,
    DeviceFault,
    Hang,
    Kernel,
    KernelFailure,
    _cuda_error,
    device_sm_count,
    kernel_launcher,
    load_kernel,
)
from kernelbook.measure.timing import Timer
from kernelbook.problems.base import CheckError
from kernelbook.provenance import sha256_file, sha256_source

# After these the CUDA context is lost: nothing more runs in the job's process.
DEVICE_LOST = frozenset({"crash", "hang"})

# The inputs a size was checked on are timed on too, kept on the device from the check to
# the timing rather than made again (seeded, they would be the same): on the H200 a book
# run spent 105 s of its GPU's time making inputs a second time. Kept while they fit in a
# quarter of the device memory free at the job's start, and 8 GiB at most; a size past that
# makes its inputs again.
KEEP_SHARE = 0.25
KEEP_MAX_BYTES = 8 << 30
KEEP_ENV = "KERNELBOOK_KEEP_BYTES"  # the budget in bytes, in place of the above


def case_bytes(case) -> int:
    """Device bytes a case holds: inputs, guarded outputs and their initial values."""
    arrays = [*case.inputs.values(), *(g.full for g in case.outputs.values())]
    arrays += [a for a in case.initial.values() if getattr(a, "ndim", 0)]
    return sum(int(a.nbytes) for a in arrays)


def _dims(d) -> str:
    return ",".join(str(x) for x in d)


def quiet_dead_context() -> None:
    """After a crash or a hang the CUDA context is gone: every CUDA object freed from then
    on (a CuPy event, stream or buffer dropped with the failed size's frames) fails in its
    destructor, and Python prints each as 'Exception ignored ... Traceback'. Those errors
    say nothing new (the failure is already a row), so from here on CUDA errors raised in
    destructors are dropped; any other unraisable exception still reaches the old hook."""
    previous = sys.unraisablehook
    if getattr(previous, "kernelbook_dead_context", False):
        return

    def hook(unraisable):
        if unraisable.exc_value is not None and _cuda_error(unraisable.exc_value):
            return
        previous(unraisable)

    hook.kernelbook_dead_context = True
    sys.unraisablehook = hook


def _triton_text() -> str:
    """Triton's version, where it is installed (it compiled the triton variants)."""
    try:
        from importlib.metadata import version

        return f", triton {version('triton')}"
    except Exception:
        return ""


def _cupti_text(timer) -> str:
    """cupti-python's version, where it timed the rows."""
    if timer.clock is None:
        return ""
    api = "" if timer.clock.api == "launches" else f" (API records: {timer.clock.api})"
    return f", cupti-python {timer.clock.version}{api}"


class Bench:
    """The device-side state shared by all sizes of one job."""

    def __init__(self, project: Project, study: Study, slot_uuid: str, log: Callable[[str], None]):
        import cupy as cp
        import torch

        self.cp, self.torch = cp, torch
        self.project, self.study = project, study
        self.problem = problems.get(study.problem)
        self.log = log
        self.uuid = slot_uuid
        props = cp.cuda.runtime.getDeviceProperties(0)
        self.l2_bytes = int(props["l2CacheSize"])
        self.torch_stream = torch.cuda.Stream()
        self.stream = cp.cuda.ExternalStream(self.torch_stream.cuda_stream)
        self.timer = Timer(study.timing, self.l2_bytes, self.stream, self.torch_stream)
        self.provenance = {
            **gpu.cuda_provenance(slot_uuid),
            "seed": int(project.settings["seed"]),
            "arch": project.settings["arch"],
            "cache": study.timing["cache"],
            # the planned instrument; a timed row has its measurement's own (a fallback)
            "timing_method": self.timer.instrument,
            "timing_note": self.timer.note,
            "graph_launches": (
                int(study.timing.get("graph_launches", 20))
                if study.timing["method"] == "graph"
                else None
            ),
            "flush_bytes": self.timer.flush_bytes,
            "blocking_kernel": self.timer.blocking,
            "software": f"python {platform.python_version()}, cupy {cp.__version__}, "
            f"torch {torch.__version__}" + _triton_text() + _cupti_text(self.timer),
            **gpu.host_provenance(project.root),
        }
        self.sampler = gpu.Sampler(slot_uuid)
        # each size's checked case is kept for its timing, no second input set-up, while the
        # kept cases fit in this many bytes (a share of the memory free now, capped)
        free, _ = cp.cuda.runtime.memGetInfo()
        self.keep_bytes = min(KEEP_MAX_BYTES, int(free * KEEP_SHARE))
        if os.environ.get(KEEP_ENV):  # a test's: 0 makes every size's inputs again
            self.keep_bytes = int(os.environ[KEEP_ENV])

    def close(self):
        self.timer.close()  # never raises: a crash is reported by whoever caught it
        self.sampler.close()

    # ------------------------------------------------------------------------------
    def load(self, variant: Variant, build: BuildInfo) -> Kernel:
        return load_kernel(self.project.root, self.study, variant, build.cubin, build.smem)

    def launcher(self, kernel: Kernel, variant: Variant, sizes, case):
        return kernel_launcher(kernel, self.study, variant, sizes, case)

    def where(self, variant: Variant, sizes) -> str:
        label = " ".join(f"{k}={v}" for k, v in sizes.items())
        return f"{self.study.name}/{variant.id} at {label}"

    def check(self, kernel, variant: Variant, sizes):
        """One launch on fresh inputs, checked; returns (case, run, launch, CheckResult)."""
        where = self.where(variant, sizes)
        tol = self.study.tolerance or self.problem.tolerance(sizes, self.study.dtype)
        case = self.problem.setup(
            sizes,
            self.study.dtype,
            self.study.params,
            self.project.settings["seed"],
            computes=variant.computes,
        )
        run, launch = self.launcher(kernel, variant, sizes, case)
        try:
            case.reset()
            self.timer.wait_stream(f"{where} (input setup)")
            self.timer.run_once(run, where)
        except Hang:
            raise
        except DeviceFault as e:
            raise Crash(str(e)) from None
        except Exception as e:
            if _cuda_error(e):
                raise Crash(f"{where}: the kernel failed to launch or crashed: {e}") from None
            raise
        return case, run, launch, self.problem.check(case, tol, where), tol

    def free(self):
        self.cp.get_default_memory_pool().free_all_blocks()
        self.torch.cuda.empty_cache()


def bench_variant(
    project: Project,
    study: Study,
    variant: Variant,
    build: BuildInfo,
    slot_uuid: str,
    sizes: list[dict] | None = None,
    tolerate_failure: bool = False,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
    samples: list[dict] | None = None,
) -> list[dict]:
    """Rows of the measurements table for one variant (one job); every timed sample is
    appended to ``samples`` (rows of the samples table) when it is given."""
    problem = problems.get(study.problem)
    if sizes is None:
        sizes = list(variant.tune_sizes) if variant.tune_sizes else list(study.sizes)
    began = time.monotonic()
    b = Bench(project, study, slot_uuid, log)
    src = project.root / variant.source
    static = {
        "study": study.name,
        "problem": study.problem,
        "variant": variant.id,
        "variant_kind": "candidate" if variant.tuned_from else "variant",
        "tuned_from": variant.tuned_from,
        "tune_point": json.dumps(variant.tune_point) if variant.tuned_from else None,
        "dtype": study.dtype,
        "params": json.dumps(study.params, sort_keys=True),
        "baseline": study.baseline,
        "source_sha256": sha256_source(src),
        "spec_sha256": variant.spec_sha256(),
        "cubin_sha256": "" if build.failed or variant.kind == "torch" else sha256_file(build.cubin),
        "defines": json.dumps(variant.defines),
        "nvcc_flags": build.nvcc_flags,
        "nvcc_version": build.nvcc_version,
        **b.provenance,
        "arch": variant.target(project.settings["arch"]),
    }

    columns = dict.fromkeys(tables.schema("measurements", problem.size_names).names)

    def blank(s, status, reason):
        flop, nbytes = problem.cost(s, study.dtype, variant.computes, study.params)
        return {
            **columns,
            **static,
            **s,
            "size": problem.label(s),
            "status": status,
            "reason": reason,
            "flop": flop,
            "bytes_min": nbytes,
            "tolerance": study.tolerance or problem.tolerance(s, study.dtype),
            "measured_at": provenance.now(),
        }

    runnable, rows = [], []
    for s in sizes:
        unmet = variant.unmet(s)
        if unmet:
            log(f"{b.where(variant, s)}: skipped, requires {' and '.join(unmet)}")
            rows.append(blank(s, "skipped", "requires " + " and ".join(unmet)))
        else:
            runnable.append(s)

    def fail(s, kind: str, reason: str) -> None:
        log(f"{b.where(variant, s)}: failed ({kind}): {reason}")
        rows.append({**blank(s, "failed", f"{kind}: {reason}"), "failure": kind})

    checked: dict[str, tuple] = {}
    kept: dict[str, object] = {}  # the case checked, kept for the size's timing
    keep_left = b.keep_bytes
    spent: dict[str, float] = {}  # seconds of each size's check
    init_s = None
    current = None  # the size being run when a crash or hang ends the job's use of the GPU
    try:
        if build.failed:
            for s in runnable:
                fail(s, build.failed_kind, build.failed)
            runnable = []
        else:
            kernel = b.load(variant, build)
        init_s = time.monotonic() - began
        with b.stream, b.torch.cuda.stream(b.torch_stream):
            for s in runnable:  # correct before fast: every size, before any timing
                current = s
                t0 = time.monotonic()
                try:
                    case, run, launch, result, tol = b.check(kernel, variant, s)
                except CheckError as e:
                    if not tolerate_failure:
                        raise
                    fail(s, e.kind, str(e))  # the kernel ran: the other sizes still can
                    b.free()
                    continue
                finally:
                    spent[problem.label(s)] = time.monotonic() - t0
                log(f"{b.where(variant, s)}: correct, rel_err {result.rel_err:.2e} (tol {tol:.1e})")
                # the float64 reference, kept in host memory for the size's timing, whose
                # baselines are checked against it: computed once per size, not twice
                ref = {k: b.cp.asnumpy(v) for k, v in case.reference.items()}
                checked[problem.label(s)] = (result, launch, ref)
                case.reference, case.input_copies = {}, {}  # on the host now; checked
                held = case_bytes(case)
                if held <= keep_left:
                    keep_left -= held
                    kept[problem.label(s)] = case
                del case, run
                b.free()
            for s in runnable:
                if problem.label(s) not in checked:
                    continue
                current = s
                t0 = time.monotonic()
                row = _time_size(
                    b,
                    kernel,
                    variant,
                    s,
                    checked[problem.label(s)],
                    blank,
                    samples,
                    kept.pop(problem.label(s), None),
                )
                row["timing_s"] = time.monotonic() - t0
                rows.append(row)
                b.free()
    except (KernelFailure, Hang) as e:
        kind = getattr(e, "kind", "hang")
        if kind in DEVICE_LOST:
            quiet_dead_context()  # before the failed size's CUDA objects are dropped
        if not tolerate_failure:
            raise
        done = {r["size"] for r in rows}
        at = problem.label(current) if current is not None else None
        for s in runnable:
            label = problem.label(s)
            if label in done:
                continue
            if at is None or label == at:
                fail(s, kind, str(e))
            else:
                fail(s, kind, f"not run: the {kind} at {at} ended the job's use of the GPU ({e})")
    finally:
        b.close()
    for r in rows:  # the job's set-up, shared by its sizes, and each size's check
        r.update(init_s=init_s, check_s=spent.get(r["size"]))
    order = {problem.label(s): i for i, s in enumerate(sizes)}
    return sorted(rows, key=lambda r: order.get(r["size"], len(order)))


def device_lost(rows: list[dict]) -> bool:
    """A crash or a hang among ``rows``: the process must leave without touching the GPU."""
    return any(r.get("failure") in DEVICE_LOST for r in rows)


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


def _copy_launcher(b: Bench, nbytes: float):
    """A device-to-device copy that reads and writes ``nbytes`` in all: the ceiling a
    bandwidth-bound kernel is compared with, at its own byte count, in its own job."""
    cp = b.cp
    half = max(256, int(nbytes // 2) // 256 * 256)
    src = cp.empty(half, dtype=cp.uint8)
    src.fill(1)
    return memcpy_launcher(cp, cp.empty_like(src), src, half, b.stream.ptr)


def _read_launcher(b: Bench, nbytes: float):
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


def _sample_rows(b: Bench, variant, label: str, stats) -> list[dict]:
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


def _time_size(b: Bench, kernel, variant, s, checked, blank, samples=None, kept=None) -> dict:
    """The row of size ``s``, timed on the case its check ran (``kept``), or on the same
    seeded inputs made again; its launch set up again either way (another size's set-up
    since changed the kernel's dynamic shared memory allowance)."""
    study, problem = b.study, b.problem
    result, _, reference = checked
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
    flop, nbytes = problem.cost(s, study.dtype, variant.computes, study.params)
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
        reference = _read_launcher if study.bandwidth_reference == "read" else _copy_launcher
        fns["copy"] = reference(b, nbytes)
        part(study.bandwidth_reference, t)
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
        f"set-up {sampling - began:.2f} s ("
        + ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
        + f"), sampling {took:.2f} s: {rounds} rounds of {len(fns)}, "
        f"{took / rounds * 1e3:.1f} ms a round"
    )
    env = b.sampler.summary()
    if samples is not None:
        samples += _sample_rows(b, variant, problem.label(s), stats)
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

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
    kernel_launcher,
    load_kernel,
)
from kernelbook.measure.sizes import Prepared, prepare_size, prepared_bytes, time_prepared
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

    def out_of_memory(self, e: BaseException) -> bool:
        """Whether ``e`` says the device memory ran out (CuPy's, torch's or a library's)."""
        kinds = (self.cp.cuda.memory.OutOfMemoryError, self.torch.cuda.OutOfMemoryError)
        text = str(e)
        return isinstance(e, kinds) or "out of memory" in text.lower() or "ALLOC_FAILED" in text

    def settle(self):
        """Wait for all this process's GPU work, on every stream: before the GPU's lock
        changes hands (shared to exclusive), nothing of the set-up may still run."""
        self.cp.cuda.runtime.deviceSynchronize()


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
    hold: Callable[[bool], object] = lambda shared: None,
) -> list[dict]:
    """Rows of the measurements table for one variant (one job); every timed sample is
    appended to ``samples`` (rows of the samples table) when it is given.

    ``hold(shared)`` holds the GPU's lock shared (True) or alone (False; kernelbook.gpu's
    switch_mode): the checks and the set-up of the sizes kept on the device run beside
    other jobs' checks, and only the sampling holds the GPU alone."""
    problem = problems.get(study.problem)
    if sizes is None:
        sizes = list(variant.tune_sizes) if variant.tune_sizes else list(study.sizes)
    began = time.monotonic()
    hold(True)
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
            alone = False  # the GPU held alone since a check ran out of memory beside others
            for s in runnable:  # correct before fast: every size, before any timing
                current = s
                t0 = time.monotonic()
                try:
                    while True:
                        try:
                            case, run, launch, result, tol = b.check(kernel, variant, s)
                            break
                        except Exception as e:
                            if alone or not b.out_of_memory(e):
                                raise
                        # out of memory beside the other jobs' checks (the error let go, and
                        # its frames' arrays with it): this size again, and the job's other
                        # sizes, with the GPU alone
                        log(
                            f"{b.where(variant, s)}: out of device memory beside other jobs' "
                            "checks: checked again with the GPU alone"
                        )
                        b.free()
                        hold(False)
                        alone = True
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
            # the kept sizes set up for their timing (baselines, references) while the GPU
            # is still shared, as far as the keep budget goes; the others at their timing
            prepared: dict[str, Prepared] = {}
            prep_s: dict[str, float] = {}
            for s in runnable:
                label = problem.label(s)
                if label not in kept:
                    continue
                nbytes = problem.cost(s, study.dtype, variant.computes, study.params)[1]
                more = prepared_bytes(kept[label], checked[label][2], study, nbytes)
                if more > keep_left:
                    continue
                keep_left -= more
                current = s
                t0 = time.monotonic()
                case = kept.pop(label)
                try:
                    prepared[label] = prepare_size(b, kernel, variant, s, checked[label], case)
                except Exception as e:
                    if not b.out_of_memory(e):
                        raise
                else:
                    prep_s[label] = time.monotonic() - t0
                    continue
                del case  # out of memory: this size and the rest set up at their timing
                b.free()
                break
            b.settle()  # nothing of the set-up runs once the GPU is another's alone
            hold(False)
            for s in runnable:
                label = problem.label(s)
                if label not in checked:
                    continue
                current = s
                t0 = time.monotonic()
                p = prepared.pop(label, None)
                if p is None:
                    p = prepare_size(b, kernel, variant, s, checked[label], kept.pop(label, None))
                row = time_prepared(b, kernel, variant, s, p, checked[label], blank, samples)
                row["timing_s"] = time.monotonic() - t0 + prep_s.get(label, 0.0)
                rows.append(row)
                del p
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

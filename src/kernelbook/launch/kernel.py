"""Load a variant's kernel (a cubin's functions, or a torch entry) and make its launch: a
zero-argument function on the current stream, the bench's and ``kernelbook launch``'s alike."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelbook import problems
from kernelbook.config import Launch, Study, Variant
from kernelbook.launch import driver


class KernelFailure(RuntimeError):
    """A variant could not be run or checked at a size (crash, launch error, hang, wrong)."""

    kind = "launch"


class Crash(KernelFailure):
    kind = "crash"


class Hang(RuntimeError):
    """A launch did not finish within the configured time."""

    kind = "hang"


class DeviceFault(RuntimeError):
    """The device reported an error (a crashed kernel leaves a sticky error in the context)."""

    kind = "crash"


CUDA_SUCCESS = 0
CUDA_ERROR_NOT_READY = 600  # cudaErrorNotReady


def event_status(event) -> int:
    """cudaEventQuery's status code for a CuPy event (CuPy returns it without raising)."""
    import cupy as cp

    return int(cp.cuda.runtime.eventQuery(event.ptr))


def error_name(status: int) -> str:
    import cupy as cp

    try:
        return cp.cuda.runtime.getErrorName(status)
    except Exception:  # an unknown code
        return f"CUDA error {status}"


def wait_event(event, timeout_s: float, what: str, limit_name: str, spin: bool = False) -> None:
    """Wait for a recorded CuPy ``event``, the one hang and fault watch of every launch
    (the timer's samples, ``kernelbook launch`` under ncu and compute-sanitizer): still
    running after ``timeout_s`` is a Hang (``limit_name`` names the setting in the message);
    an error status (a kernel that faulted leaves the context in a sticky error) is a
    DeviceFault, reported at once. Polls for 50 us, then sleeps, 50 us more each time up to
    2 ms, between queries (``spin``: never sleeps). Each query is an API call that CUPTI
    records while it times a sample, so a long spin costs the host's next flush."""
    start = time.monotonic()
    pause = 0.0
    while True:
        status = event_status(event)
        if status == CUDA_SUCCESS:
            return
        if status != CUDA_ERROR_NOT_READY:
            name = error_name(status)
            raise DeviceFault(f"{what}: the device reported {name} (a kernel crashed)")
        elapsed = time.monotonic() - start
        if elapsed > timeout_s:
            raise Hang(f"{what}: still running after {timeout_s:g} s ({limit_name}); hang?")
        if elapsed > 0.00005 and not spin:
            pause = min(0.002, pause + 0.00005)
            time.sleep(pause)


def _cuda_error(e: BaseException) -> bool:
    return (
        type(e).__module__.startswith(("cupy", "cupy_backends"))
        or "CUDA" in type(e).__name__
        or type(e).__name__ == "AcceleratorError"  # torch's CUDA errors
        or "CUDA error" in str(e)
    )


# Triton 3.x appends two pointer parameters to every kernel (global and profile scratch);
# kernels that need no scratch memory (kinds.compile_triton refuses others) get null.
TRITON_HIDDEN_PARAMS = 2


@dataclass
class Kernel:
    """What a job launches: a cubin's function (cuda, triton) or a torch variant's entry."""

    kind: str
    fn: Any
    smem: int | None = None  # triton: the dynamic shared memory its launch passes
    then: tuple[Any, ...] = ()  # cuda: the functions of the variant's then: entries, in order


def load_kernel(root: Path, study: Study, variant: Variant, cubin: Path, smem=None) -> Kernel:
    """The variant's kernel, loaded from its cubin (or its torch entry, imported)."""
    where = f"{study.name}/{variant.id}"
    if variant.kind == "torch":
        from kernelbook.build import triton as kinds
        from kernelbook.build.nvcc import CompileError

        try:
            return Kernel("torch", kinds.entry_function(root, variant))
        except CompileError as e:
            raise KernelFailure(str(e)) from None
    import cupy as cp

    try:
        if variant.cluster or variant.tma:  # cuLaunchKernelEx (clusters, tensor maps)
            return Kernel("cuda_ex", driver.load(variant, cubin))
        module = cp.RawModule(path=str(cubin))
        fns = [module.get_function(e) for e in variant.entries]
    except Exception as e:
        names = ", ".join(repr(e) for e in variant.entries)
        raise KernelFailure(f"{where}: cannot load {names} from {cubin}: {e}") from None
    if variant.kind == "triton" and smem is None:
        raise KernelFailure(f"{where}: no build row gives the triton kernel's shared memory")
    return Kernel(variant.kind, fns[0], int(smem) if smem is not None else None, tuple(fns[1:]))


def kernel_launcher(kernel: Kernel, study: Study, variant: Variant, sizes, case):
    """(run, launch): a zero-argument launch of the variant on ``case`` at ``sizes``, and its
    geometry (None for a torch variant, which launches its own kernels)."""
    where = f"{study.name}/{variant.id}"
    if kernel.kind == "torch":
        from kernelbook.launch.torch_case import torch_case

        try:
            run = kernel.fn(torch_case(case, study.params), **variant.defines)
        except Exception as e:
            if _cuda_error(e):
                raise Crash(f"{where}: the torch entry crashed during its setup: {e}") from None
            raise KernelFailure(
                f"{where}: the torch entry '{variant.entry}' failed during its setup: {e!r}"
            ) from None
        if not callable(run):
            raise KernelFailure(
                f"{where}: the torch entry '{variant.entry}' returned {type(run).__name__}, "
                "not a zero-argument callable"
            )
        return run, None
    # one launch per kernel (a variant of several kernels, then:, launches them in order)
    launches = variant.launches(sizes, sm_count=device_sm_count())
    launch = launches[0]
    if kernel.kind == "cuda_ex":
        import cupy as cp

        try:
            run = driver.runner(
                kernel.fn,
                launch,
                case,
                problems.get(study.problem),
                cp.cuda.get_current_stream().ptr,
                where,
            )
        except Exception as e:
            raise KernelFailure(f"{where}: cannot set up the launch: {e}") from None
        return run, launch
    args = case.args
    if kernel.kind == "triton":
        import numpy as np

        launch = Launch(launch.grid, launch.block, kernel.smem)
        launches = [launch]  # triton's own shared memory, from its build row
        args = (*args, *([np.uint64(0)] * TRITON_HIDDEN_PARAMS))
    pairs = list(zip((kernel.fn, *kernel.then), launches, strict=True))
    for fn, one in pairs:
        if one.smem:  # see allow_dynamic_smem: static and dynamic together count
            try:
                allow_dynamic_smem(fn, one.smem)
            except Exception as e:
                raise KernelFailure(
                    f"{where}: cannot allow {one.smem} bytes of dynamic shared memory: {e}"
                ) from None
    workspace = None
    if variant.workspace:  # a scratch buffer after the problem's arguments, zeroed once
        import cupy as cp

        workspace = cp.zeros(max(1, variant.workspace_bytes(sizes)), dtype=cp.uint8)
        args = (*args, workspace)
    if len(pairs) == 1:  # the common case without the loop: less host time per launch
        fn = kernel.fn

        def run():
            fn(launch.grid, launch.block, args, shared_mem=launch.smem)

    else:

        def run():
            for fn, one in pairs:
                fn(one.grid, one.block, args, shared_mem=one.smem)

    run.workspace = workspace  # alive as long as the launcher
    return run, launch


def device_sm_count() -> int:
    """The current device's SM count: a grid's SM_COUNT (config.SM_COUNT)."""
    import cupy as cp

    return int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"])


def allow_dynamic_smem(kernel, nbytes: int) -> None:
    """Opt a kernel in to ``nbytes`` of dynamic shared memory (a CuPy RawKernel, as
    RawModule.get_function returns; older CuPy returned a Function with a driver handle).

    Done for every launch with dynamic shared memory, not only past 48 KiB: a kernel's
    default allowance is 48 KiB less its static shared memory, so 48 KiB dynamic beside any
    static array fails at launch with a bare CUDA_ERROR_INVALID_VALUE. Past the device's
    opt-in limit the attribute itself is refused, which the caller reports by name."""
    if hasattr(kernel, "max_dynamic_shared_size_bytes"):
        kernel.max_dynamic_shared_size_bytes = nbytes
    else:
        import cupy as cp

        cp.cuda.driver.funcSetAttribute(
            kernel.ptr, cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes
        )

"""Launching a variant: CuPy for plain kernels, cuLaunchKernelEx for clusters and TMA.

A plain variant is a CuPy ``RawKernel`` from its cubin, launched with its grid, block and
dynamic shared memory on the current CuPy stream (the timer's).

A variant with a ``cluster:`` or a ``tma:`` key is loaded and launched through
cuda-bindings (``cuda.bindings.driver``: cuModuleLoadData, cuFuncSetAttribute,
cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION), in the context CuPy made
current and on the stream the timer samples (its handle is passed explicitly).

Tensor maps go by value: for each matrix the ``tma:`` key names, in its order, a CUtensorMap
is encoded on the host with cuTensorMapEncodeTiled (bf16, 2-D, row-major: dimension 0 is the
columns; the box is [rows, columns] of the key, the swizzle its bytes, out-of-bounds
elements read as zero) and its 128 bytes are appended after the plain arguments. The kernel
declares them ``const __grid_constant__ CUtensorMap``: the parameter stays in the constant
bank, and its address is what cp.async.bulk.tensor takes. No descriptor lives in global
memory, so no tensormap proxy fence is needed. The kernel parameter array (void**) is built
here with ctypes and passed as an address, cuda-bindings' documented raw form.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from kernelbook.config import Launch, Variant

TENSOR_MAP_BYTES = 128


class CUDALaunchError(RuntimeError):
    """A driver call of the extended launch path failed (the name marks it as a CUDA error)."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # cuda-python before 12.6 kept it here
        from cuda import cuda as driver  # type: ignore[no-redef]
    return driver


def _check(result, what: str):
    driver = _driver()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(err)
        name = text.decode() if isinstance(text, bytes) else str(text)
        raise CUDALaunchError(f"{what} failed: {err!r} ({name})")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


class ExKernel:
    """A kernel loaded through the driver API (kept alive with its module)."""

    def __init__(self, cubin_bytes: bytes, entry: str):
        import cupy as cp

        driver = _driver()
        cp.cuda.runtime.free(0)  # CuPy's (primary) context exists and is current
        _check(driver.cuInit(0), "cuInit")
        self._image = cubin_bytes
        self.module = _check(driver.cuModuleLoadData(cubin_bytes), "cuModuleLoadData")
        self.function = _check(
            driver.cuModuleGetFunction(self.module, entry.encode()), f"cuModuleGetFunction {entry}"
        )
        self.entry = entry

    def allow_dynamic_smem(self, nbytes: int) -> None:
        driver = _driver()
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(driver.cuFuncSetAttribute(self.function, attr, nbytes), "cuFuncSetAttribute")


def load(variant: Variant, cubin_path):
    """The variant's kernel: an ExKernel when it needs cuLaunchKernelEx, else CuPy's."""
    if variant.cluster or variant.tma:
        from pathlib import Path

        return ExKernel(Path(cubin_path).read_bytes(), variant.entry)
    import cupy as cp

    return cp.RawModule(path=str(cubin_path)).get_function(variant.entry)


def encode_tensor_map(ptr: int, rows: int, cols: int, box_rows: int, box_cols: int, swizzle: int):
    """A 2-D bf16 row-major tensor map (cuTensorMapEncodeTiled); its 128 bytes."""
    driver = _driver()
    if (cols * 2) % 16:
        raise CUDALaunchError(
            f"a {rows}x{cols} bf16 matrix has a row pitch of {cols * 2} bytes; TMA needs a "
            f"multiple of 16 (columns a multiple of 8)"
        )
    sw = {
        0: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        32: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
        64: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
        128: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
    }[swizzle]
    tmap = _check(
        driver.cuTensorMapEncodeTiled(
            driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
            ptr,
            [driver.cuuint64_t(cols), driver.cuuint64_t(rows)],
            [driver.cuuint64_t(cols * 2)],
            [driver.cuuint32_t(box_cols), driver.cuuint32_t(box_rows)],
            [driver.cuuint32_t(1), driver.cuuint32_t(1)],
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            sw,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        f"cuTensorMapEncodeTiled ({rows}x{cols}, box {box_rows}x{box_cols}, swizzle {swizzle})",
    )
    return ctypes.string_at(int(tmap.getPtr()), TENSOR_MAP_BYTES)


def _arg_bytes(a) -> bytes:
    """One plain kernel argument as the bytes the kernel's parameter holds."""
    if isinstance(a, np.generic):
        return a.tobytes()
    if hasattr(a, "data") and hasattr(a.data, "ptr"):  # a CuPy array: its device pointer
        return int(a.data.ptr).to_bytes(8, "little")
    raise TypeError(f"cannot pass {type(a).__name__} to a kernel")


def pack_params(args: tuple, tensor_maps: list[bytes]):
    """(void** address, what keeps it alive): each argument's bytes in its own 64-byte
    aligned slot, then the tensor maps."""
    blobs = [_arg_bytes(a) for a in args] + list(tensor_maps)
    slots = []
    for b in blobs:
        raw = ctypes.create_string_buffer(len(b) + 64)
        addr = (ctypes.addressof(raw) + 63) // 64 * 64
        ctypes.memmove(addr, b, len(b))
        slots.append((raw, addr))
    array = (ctypes.c_void_p * max(1, len(slots)))(*[a for _, a in slots])
    return ctypes.addressof(array), (slots, array)


def matrix_pointer(case, name: str) -> int:
    if name in case.inputs:
        return int(case.inputs[name].data.ptr)
    if name in case.outputs:
        return int(case.outputs[name].view.data.ptr)
    raise KeyError(name)


def runner(
    kernel: ExKernel, launch: Launch, case, problem, stream_ptr: int, where: str
) -> Callable:
    """A function that launches the ExKernel ``kernel`` once with ``case``'s arguments on
    the stream ``stream_ptr``, through cuLaunchKernelEx (clusters, tensor maps)."""
    if launch.smem:  # static and dynamic together count (kernel.allow_dynamic_smem)
        kernel.allow_dynamic_smem(launch.smem)
    driver = _driver()
    maps = []
    shapes = problem.matrices(case.sizes) if launch.tma else {}
    for name, box_rows, box_cols, swizzle in launch.tma:
        rows, cols = shapes[name]
        try:
            maps.append(
                encode_tensor_map(
                    matrix_pointer(case, name), rows, cols, box_rows, box_cols, swizzle
                )
            )
        except CUDALaunchError as e:
            raise CUDALaunchError(f"{where}: tma.{name}: {e}") from None
    params, keep = pack_params(case.args, maps)
    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = launch.grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = launch.block
    cfg.sharedMemBytes = launch.smem
    cfg.hStream = driver.CUstream(stream_ptr)
    if launch.cluster != (1, 1, 1):
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = launch.cluster
        cfg.attrs = [attr]
        cfg.numAttrs = 1
    else:
        cfg.numAttrs = 0
    function = kernel.function

    def run():
        _check(driver.cuLaunchKernelEx(cfg, function, params, 0), f"{where}: cuLaunchKernelEx")

    run.keep = (keep, cfg, kernel)  # the parameter buffers live as long as the launcher
    return run

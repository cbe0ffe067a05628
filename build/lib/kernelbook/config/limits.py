"""CUDA's launch limits, by architecture: what a geometry must satisfy to launch."""

from __future__ import annotations

# CUDA's launch limits (CUDA C++ Programming Guide, "Features and Technical Specifications"),
# the same on every architecture since sm_30.
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
# The dynamic shared memory one block may opt into (cudaFuncAttributeMaxDynamicSharedMemorySize
# up to cudaDevAttrMaxSharedMemoryPerBlockOptin), by compute capability, from the same table.
# An arch not listed here is not checked at config load; the launch on the GPU still is.
SMEM_OPTIN_BYTES = {
    70: 96 * 1024,  # V100
    75: 64 * 1024,  # T4
    80: 163 * 1024,  # A100
    86: 99 * 1024,
    87: 163 * 1024,
    89: 99 * 1024,  # L4, L40
    90: 227 * 1024,  # H100, H200 (sm_90 and sm_90a)
    100: 227 * 1024,  # B200
    120: 99 * 1024,
}


def arch_number(arch: str) -> int | None:
    """The compute capability of an nvcc target as a number (sm_90a -> 90)."""
    digits = "".join(ch for ch in arch.partition("_")[2] if ch.isdigit())
    return int(digits) if digits else None


def smem_optin_limit(arch: str) -> int | None:
    """The dynamic shared memory limit of an nvcc target (sm_90a -> 90), None if not tabled."""
    num = arch_number(arch)
    return SMEM_OPTIN_BYTES.get(num) if num else None


# Thread block clusters: sm_90 and later; 8 blocks is the portable maximum.
MAX_CLUSTER_BLOCKS = 8
# TMA (cuTensorMapEncodeTiled): each box dimension 1..256 elements, the inner one a multiple
# of 16 bytes and, with a swizzle, no wider than the swizzle span.
MAX_TMA_BOX = 256


def cluster_problems(grid: list[int], cluster: list[int]) -> list[str]:
    out = []
    if any(c < 1 for c in cluster):
        out.append(f"cluster {cluster} has a zero")
        return out
    n = cluster[0] * cluster[1] * cluster[2]
    if n > MAX_CLUSTER_BLOCKS:
        out.append(f"cluster {cluster} has {n} blocks (> {MAX_CLUSTER_BLOCKS}, the portable size)")
    if any(g % c for g, c in zip(grid, cluster, strict=True)):
        out.append(f"grid {grid} is not a multiple of cluster {cluster}")
    return out


def tma_problems(name: str, rows: int, cols: int, swizzle: int, itemsize: int = 2) -> list[str]:
    out = []
    for what, d in (("rows", rows), ("columns", cols)):
        if not 1 <= d <= MAX_TMA_BOX:
            out.append(f"tma.{name}.box {what} {d} outside 1..{MAX_TMA_BOX}")
    inner = cols * itemsize
    if inner % 16:
        out.append(f"tma.{name}.box: {cols} columns are {inner} bytes, not a multiple of 16")
    if swizzle and inner > swizzle:
        out.append(
            f"tma.{name}.box: {cols} columns are {inner} bytes, wider than the {swizzle}-byte "
            f"swizzle"
        )
    return out


def launch_problems(
    grid: list[int], block: list[int], smem: int, smem_limit: int | None = None
) -> list[str]:
    """What makes this geometry impossible to launch, as short phrases (empty: it launches)."""
    out = []
    threads = block[0] * block[1] * block[2]
    for name, dims, top in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        if any(d < 1 for d in dims):
            out.append(f"{name} {dims} has a zero")
        elif name == "block" and threads > MAX_THREADS_PER_BLOCK:
            out.append(f"block {block} has {threads} threads (> {MAX_THREADS_PER_BLOCK})")
        elif any(d > m for d, m in zip(dims, top, strict=True)):
            out.append(f"{name} {dims} exceeds CUDA's limit {list(top)}")
    if smem < 0:
        out.append(f"negative dynamic shared memory {smem}")
    elif smem_limit is not None and smem > smem_limit:
        out.append(
            f"dynamic shared memory {smem} bytes exceeds the {smem_limit} bytes a block may use"
        )
    return out


# The device's SM count, a name only grid expressions may use; NOMINAL_SM_COUNT (the
# H100/H200 SXM's) stands in where no device is at hand (config checks, CPU tests).
SM_COUNT = "SM_COUNT"
NOMINAL_SM_COUNT = 132

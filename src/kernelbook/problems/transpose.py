"""Matrix transpose: out = in^T, float32, row-major. A bandwidth problem: no arithmetic.

Kernel ABI (every transpose variant's entry point):

    extern "C" __global__ void entry(int M, int N, const float* __restrict__ in,
                                     float* __restrict__ out)

``in`` is M x N and ``out`` is N x M, both row-major and contiguous, 256-byte aligned (CuPy's
allocations; the guard band in front of ``out`` is a multiple of 256 bytes). ``out`` is
poisoned with NaN before every launch and has guard bands on both sides, so an element a
kernel does not write, or writes out of bounds, fails the check.

A transpose moves bits, so the check is exact: tolerance 0, and the generic relative-norm
check then passes only a bit-identical result (float32 -> float64 is exact, and any wrong
element makes the norm of the difference positive; NaN never passes).

The alternative ``copy`` (variant key ``computes: copy``) is out = in, same shape (M x N):
the plain copy kernel that is this ladder's ceiling, checked the same way.
"""

from __future__ import annotations

from kernelbook.problems.base import (
    GUARD_ELEMENTS,
    Baseline,
    Case,
    GuardedArray,
    Problem,
    size_seed,
)

ITEMSIZE = 4


class Transpose(Problem):
    name = "transpose"
    size_names = ("M", "N")
    dtypes = ("float32",)
    baselines = {"torch": "torch: out.copy_(x.t()) into a preallocated N x M tensor"}
    default_params = {}
    alternatives = {"copy": "out = in (M x N): the copy kernel the transpose is measured against"}
    figure_of_merit = "gbps"

    # ---- cost model ------------------------------------------------------------------
    def flops(self, s):
        return 0.0

    def min_bytes(self, s, dtype):
        # every element read once and written once
        return float(2 * s["M"] * s["N"] * ITEMSIZE)

    def tolerance(self, s, dtype):
        return 0.0  # bit-exact (see the module docstring)

    # ---- device side -----------------------------------------------------------------
    def kernel_arg_types(self, dtype: str) -> tuple[str, ...]:
        return ("i32", "i32", "*fp32", "*fp32")

    def setup(
        self, sizes, dtype, params, seed, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        import cupy as cp

        rng = cp.random.Generator(cp.random.XORWOW(size_seed(seed, sizes)))
        x = rng.standard_normal((sizes["M"], sizes["N"]), dtype=cp.float32)
        return self.build_case(cp, sizes, dtype, seed, x, guard, reference, computes)

    def build_case(
        self, xp, sizes, dtype, seed, x, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        """The case around input ``x`` (M x N float32) in array module ``xp``: CuPy on the
        device, NumPy where the CPU tests exercise the check."""
        import numpy as np

        if computes not in (None, "copy"):
            raise KeyError(f"transpose has no alternative '{computes}'")
        M, N = sizes["M"], sizes["N"]
        out = GuardedArray(xp, M * N, xp.float32, guard)
        ref = {}
        if reference:
            src = x if computes == "copy" else x.T
            ref = {"out": xp.ascontiguousarray(src, dtype=xp.float64).ravel()}
        case = Case(
            sizes=dict(sizes),
            dtype=dtype,
            seed=seed,
            inputs={"x": x},
            outputs={"out": out},
            reference=ref,
            args=(np.int32(M), np.int32(N), x, out.view),
        )
        return case.ready()

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch

        self.known_baseline(name)
        M, N = case.sizes["M"], case.sizes["N"]
        x = torch.as_tensor(case.inputs["x"], device="cuda")
        out = torch.empty((N, M), dtype=torch.float32, device="cuda")

        def run():
            out.copy_(x.t())

        out.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        # against the transpose itself, not case.reference: a `computes: copy` case holds the
        # copy's reference, while the baseline always computes the problem's own function
        got = cp.asarray(out).astype(cp.float64)
        want = cp.asarray(case.inputs["x"]).T.astype(cp.float64)
        norm = float(cp.linalg.norm(want))
        diff = got - want
        rel = float(cp.linalg.norm(diff)) / norm if norm else float(cp.abs(diff).max())
        if not bool(cp.isfinite(got).all()):
            rel = float("inf")
        mode = f"torch {torch.__version__} out.copy_(x.t()), float32"
        return Baseline(name=name, mode=mode, run=run, rel_err=rel)

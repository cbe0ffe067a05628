"""GEMM: C = alpha * A @ B + beta * C, row-major.

Kernel ABI (every gemm variant's entry point):

    extern "C" __global__ void entry(int M, int N, int K, float alpha,
                                     const float* A, const float* B, float beta, float* C)

A is M x K, B is K x N, C is M x N, all row-major and contiguous. C is read (beta != 0),
so an element a kernel forgets to write keeps its random initial value and fails the check.
"""

from __future__ import annotations

import math

from kernelbook.problems.base import (
    GUARD_ELEMENTS,
    Baseline,
    Case,
    GuardedArray,
    Problem,
    rel_err,
    size_seed,
)


class Gemm(Problem):
    name = "gemm"
    size_names = ("M", "N", "K")
    dtypes = ("float32",)
    baselines = {"cublas": "cuBLAS GEMM through torch.Tensor.addmm_"}
    default_params = {"alpha": 1.25, "beta": 0.75}
    figure_of_merit = "tflops"

    def flops(self, s):
        return 2.0 * s["M"] * s["N"] * s["K"]

    def min_bytes(self, s, dtype):
        item = 4 if dtype == "float32" else 2
        return float(item * (s["M"] * s["K"] + s["K"] * s["N"] + 2 * s["M"] * s["N"]))

    def tolerance(self, s, dtype):
        # float32 accumulation error grows like sqrt(K); 1e-5 at K <= 1024 leaves ~10x margin
        # over what a sequential FMA loop gives on normal inputs.
        return 1e-5 * math.sqrt(max(s["K"], 1024) / 1024)

    def kernel_arg_types(self, dtype: str) -> tuple[str, ...]:
        return ("i32", "i32", "i32", "fp32", "*fp32", "*fp32", "fp32", "*fp32")

    def setup(
        self, sizes, dtype, params, seed, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        import cupy as cp

        M, N, K = sizes["M"], sizes["N"], sizes["K"]
        rng = cp.random.Generator(cp.random.XORWOW(size_seed(seed, sizes)))
        A = rng.standard_normal((M, K), dtype=cp.float32)
        B = rng.standard_normal((K, N), dtype=cp.float32)
        C0 = rng.standard_normal((M, N), dtype=cp.float32)
        return self.build_case(cp, sizes, dtype, params, seed, A, B, C0, guard, reference)

    def build_case(
        self, xp, sizes, dtype, params, seed, A, B, C0, guard=GUARD_ELEMENTS, reference=True
    ) -> Case:
        """The case C = alpha A B + beta C0 around float32 ``A`` (M x K), ``B`` (K x N) and
        ``C0`` (M x N, C's value before each launch) in array module ``xp``: CuPy on the
        device, NumPy where the CPU tests run it."""
        import numpy as np

        M, N, K = sizes["M"], sizes["N"], sizes["K"]
        C = GuardedArray(xp, M * N, xp.float32, guard)
        alpha, beta = float(params["alpha"]), float(params["beta"])
        ref = None
        if reference:
            ref = alpha * (A.astype(xp.float64) @ B.astype(xp.float64)) + beta * C0.astype(
                xp.float64
            )
        case = Case(
            sizes=dict(sizes),
            dtype=dtype,
            seed=seed,
            inputs={"A": A, "B": B},
            outputs={"C": C},
            initial={"C": C0.ravel()},
            reference={"C": ref.ravel()} if reference else {},
            args=(
                np.int32(M),
                np.int32(N),
                np.int32(K),
                np.float32(alpha),
                A,
                B,
                np.float32(beta),
                C.view,
            ),
        )
        return case.ready()

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch

        self.known_baseline(name)
        torch.backends.cuda.matmul.allow_tf32 = False
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
            torch.backends.cuda.matmul.fp32_precision = "ieee"
        alpha, beta = float(params["alpha"]), float(params["beta"])
        M, N = case.sizes["M"], case.sizes["N"]
        A = torch.as_tensor(case.inputs["A"], device="cuda")
        B = torch.as_tensor(case.inputs["B"], device="cuda")
        C0 = torch.as_tensor(case.initial["C"], device="cuda").view(M, N)
        C = C0.clone()

        def run():
            C.addmm_(A, B, beta=beta, alpha=alpha)

        run()
        torch.cuda.synchronize()
        rel = rel_err(cp, C, case.reference["C"])
        tf32 = torch.backends.cuda.matmul.allow_tf32
        mode = (
            f"cuBLAS via torch {torch.__version__} addmm_, float32, TF32 {'on' if tf32 else 'off'}"
        )
        return Baseline(name=name, mode=mode, run=run, rel_err=rel)

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
        import numpy as np

        M, N, K = sizes["M"], sizes["N"], sizes["K"]
        rng = cp.random.Generator(cp.random.XORWOW(size_seed(seed, sizes)))
        A = rng.standard_normal((M, K), dtype=cp.float32)
        B = rng.standard_normal((K, N), dtype=cp.float32)
        C0 = rng.standard_normal((M, N), dtype=cp.float32)
        C = GuardedArray(cp, M * N, cp.float32, guard)
        alpha, beta = float(params["alpha"]), float(params["beta"])
        ref = None
        if reference:
            ref = alpha * (A.astype(cp.float64) @ B.astype(cp.float64)) + beta * C0.astype(
                cp.float64
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
        case.input_copies = {"A": A.copy(), "B": B.copy()}
        case.reset()
        return case

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch

        if name != "cublas":
            raise KeyError(f"gemm has no baseline '{name}'")
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
        out = cp.asarray(C).ravel().astype(cp.float64)
        ref = case.reference["C"]
        rel = float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref))
        tf32 = torch.backends.cuda.matmul.allow_tf32
        mode = (
            f"cuBLAS via torch {torch.__version__} addmm_, float32, TF32 {'on' if tf32 else 'off'}"
        )
        return Baseline(name=name, mode=mode, run=run, rel_err=rel)

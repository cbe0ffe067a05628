"""HGEMM on tensor cores: C = A · Bᵀ in BF16 with FP32 accumulation.

Kernel ABI (every hgemm variant's entry point):

    extern "C" __global__ void entry(int M, int N, int K,
                                     const __nv_bfloat16* __restrict__ A,
                                     const __nv_bfloat16* __restrict__ B,
                                     __nv_bfloat16* __restrict__ C)

A is M x K and B is N x K, both row-major (so both operands are K-major, the layout WGMMA
and cuBLAS's fast path want); C is M x N row-major. All are contiguous and 256-byte aligned.
A variant with a ``tma:`` key gets one ``const __grid_constant__ CUtensorMap`` parameter per
operand it names, appended after these six, in the order of the key (kernelbook.launch).

bfloat16 without a bfloat16 array type: CuPy has none, so the buffers are uint16 arrays
holding the bits. Inputs are float32 normals rounded to bf16 on the device (round to nearest
even); the float64 reference is computed from those rounded values, so it is the exact
product of what the kernel reads. C is poisoned with bf16 NaN (0x7FC0) before every launch:
an element a kernel forgets to write fails the check as NaN.

Tolerance (norm-wise relative error, ||C - ref|| / ||ref||): the exact product is rounded to
bf16 on output, 8 significant bits, a relative error of at most 2^-8 = 3.9e-3 per element
and about 2^-8 / sqrt(3) = 2.3e-3 root-mean-square; FP32 accumulation over K <= 16384 adds
about sqrt(K) * 2^-24 < 1e-5. 1e-2 leaves ~4x margin over the output rounding and fails a
kernel that drops a K block (error ~ sqrt(BK / K) >= 6e-2 at K = 16384 with BK = 64).
"""

from __future__ import annotations

from kernelbook.problems.base import (
    GUARD_ELEMENTS,
    Baseline,
    Case,
    GuardedArray,
    XWProblem,
    rel_err,
)
from kernelbook.problems.bf16 import bf16_bits, bf16_values, torch_bf16

TOLERANCE = 1e-2


class Hgemm(XWProblem):
    name = "hgemm"
    dtypes = ("bfloat16",)
    baselines = {"cublas": "cuBLAS BF16 GEMM through torch.matmul(A, B.t(), out=C)"}
    default_params = {}
    figure_of_merit = "tflops"
    peak = "bf16_tensor"  # roofline: dense BF16 tensor peak; tensor FLOPs from the model

    # The matrices a kernel can get tensor maps of (variant key ``tma:``): name -> (rows,
    # columns) at these sizes, row-major bf16, in the kernel's argument order.
    def matrices(self, s: dict[str, int]) -> dict[str, tuple[int, int]]:
        return {"A": (s["M"], s["K"]), "B": (s["N"], s["K"]), "C": (s["M"], s["N"])}

    def flops(self, s):
        return 2.0 * s["M"] * s["N"] * s["K"]

    def min_bytes(self, s, dtype):
        # A and B read once, C written once
        return float(2 * (s["M"] * s["K"] + s["N"] * s["K"] + s["M"] * s["N"]))

    def tolerance(self, s, dtype):
        return TOLERANCE

    def kernel_arg_types(self, dtype: str) -> tuple[str, ...]:
        return ("i32", "i32", "i32", "*bf16", "*bf16", "*bf16")  # M, N, K, A, B, C

    def build_case(
        self, xp, sizes, dtype, seed, xf, wf, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        """The case around float32 values ``xf`` (A: M x K) and ``wf`` (B: N x K), rounded to bf16,
        in array module ``xp``: CuPy on the device, NumPy where the CPU tests run it."""
        import numpy as np

        if computes is not None:
            raise KeyError(f"hgemm has no alternative '{computes}'")
        if dtype != "bfloat16":
            raise KeyError(f"hgemm has no dtype '{dtype}'")
        M, N, K = sizes["M"], sizes["N"], sizes["K"]
        A, B = bf16_bits(xp, xf), bf16_bits(xp, wf)
        C = GuardedArray(xp, M * N, "bfloat16", guard)
        ref = {}
        if reference:
            a = bf16_values(xp, A).astype(xp.float64)
            b = bf16_values(xp, B).astype(xp.float64)
            ref = {"C": (a @ b.T).ravel()}
            del a, b
        case = Case(
            sizes=dict(sizes),
            dtype=dtype,
            seed=seed,
            inputs={"A": A, "B": B},
            outputs={"C": C},
            reference=ref,
            args=(np.int32(M), np.int32(N), np.int32(K), A, B, C.view),
        )
        return case.ready()

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch

        self.known_baseline(name)
        M, N, K = case.sizes["M"], case.sizes["N"], case.sizes["K"]
        A = torch_bf16(case.inputs["A"], M, K)
        B = torch_bf16(case.inputs["B"], N, K)
        C = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
        Bt = B.t()

        def run():
            torch.matmul(A, Bt, out=C)

        C.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        rel = rel_err(cp, C, case.reference["C"])
        red = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        mode = (
            f"cuBLAS via torch {torch.__version__} matmul(A, B.t(), out=C), bf16 in/out, "
            f"fp32 accumulate, allow_bf16_reduced_precision_reduction={red}"
        )
        return Baseline(name=name, mode=mode, run=run, rel_err=rel)

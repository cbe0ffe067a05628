"""Row softmax: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)), float32 or bfloat16.

Kernel ABI (every softmax variant's entry point):

    extern "C" __global__ void entry(int R, int N, const T* __restrict__ x, T* __restrict__ y)

x and y are R x N, row-major, contiguous and 256-byte aligned. T is float (study dtype
float32) or __nv_bfloat16 (dtype bfloat16); the kernel learns which from a define the study
gives it (DTYPE_F32 or DTYPE_BF16), so one source serves both studies.

bfloat16 without a bfloat16 array type: CuPy has none, so bf16 buffers are uint16 arrays
holding the bits. Inputs are drawn as float32 normals and rounded to bf16 (round to nearest
even, on the device); the float64 reference is computed from those rounded values, so it is
the exact softmax of what the kernel reads. The check decodes the output bits to float32
before the generic relative-norm check, and y is poisoned with bf16 NaN (0x7FC0) before every
launch, so an unwritten element fails as NaN. The torch baseline sees the same bytes through
a zero-copy int16 -> bfloat16 view.
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
from kernelbook.problems.bf16 import bf16_bits, bf16_values, torch_bf16

ITEMSIZE = {"float32": 4, "bfloat16": 2}


def softmax64(xp, values):
    """float64 softmax over the last axis of a 2-D array, flattened."""
    z = values.astype(xp.float64)
    z -= z.max(axis=1, keepdims=True)
    xp.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z.ravel()


class Softmax(Problem):
    name = "softmax"
    size_names = ("R", "N")
    dtypes = ("float32", "bfloat16")
    baselines = {"torch": "torch.softmax(x, dim=-1, out=y) into a preallocated tensor"}
    default_params = {}
    alternatives = {}
    figure_of_merit = "gbps"

    # ---- cost model ------------------------------------------------------------------
    def flops(self, s):
        # max, subtract, exp, add, scale: one each per element (exp counted as one). The
        # figure of merit is bandwidth; this count orders sizes and fills the tflops column.
        return 5.0 * s["R"] * s["N"]

    def min_bytes(self, s, dtype):
        # x read once, y written once
        return float(2 * s["R"] * s["N"] * ITEMSIZE[dtype])

    def tolerance(self, s, dtype):
        if dtype == "bfloat16":
            # the output's own rounding (2^-9 relative per element, ~1.1e-3 norm-wise)
            # dominates; ~9x margin
            return 1e-2
        # float32: the row sum's rounding error grows like sqrt(N) for a sequential sum
        # (the thread-per-row variant); 1e-5 at N <= 1024, as for gemm's K
        return 1e-5 * math.sqrt(max(s["N"], 1024) / 1024)

    # ---- device side -----------------------------------------------------------------
    def kernel_arg_types(self, dtype: str) -> tuple[str, ...]:
        t = {"float32": "*fp32", "bfloat16": "*bf16"}[dtype]
        return ("i32", "i32", t, t)

    def setup(
        self, sizes, dtype, params, seed, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        import cupy as cp

        rng = cp.random.Generator(cp.random.XORWOW(size_seed(seed, sizes)))
        xf = rng.standard_normal((sizes["R"], sizes["N"]), dtype=cp.float32)
        return self.build_case(cp, sizes, dtype, seed, xf, guard, reference, computes)

    def build_case(
        self, xp, sizes, dtype, seed, xf, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        """The case around float32 values ``xf`` (R x N; rounded to bf16 for bfloat16) in
        array module ``xp``: CuPy on the device, NumPy where the CPU tests exercise the
        check."""
        import numpy as np

        if computes is not None:
            raise KeyError(f"softmax has no alternative '{computes}'")
        if dtype not in ITEMSIZE:
            raise KeyError(f"softmax has no dtype '{dtype}'")
        R, N = sizes["R"], sizes["N"]
        if dtype == "bfloat16":
            x = bf16_bits(xp, xf)
            del xf
            values = bf16_values(xp, x)
        else:
            x = values = xf
        y = GuardedArray(xp, R * N, dtype, guard)  # poisoned before each launch: NaN
        ref = {"y": softmax64(xp, values)} if reference else {}
        del values
        case = Case(
            sizes=dict(sizes),
            dtype=dtype,
            seed=seed,
            inputs={"x": x},
            outputs={"y": y},
            reference=ref,
            args=(np.int32(R), np.int32(N), x, y.view),
        )
        return case.ready()

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch

        self.known_baseline(name)
        R, N = case.sizes["R"], case.sizes["N"]
        x = case.inputs["x"]
        if case.dtype == "bfloat16":
            xt = torch_bf16(x, R, N)
        else:
            xt = torch.as_tensor(x, device="cuda").view(R, N)
        y = torch.empty_like(xt)

        def run():
            torch.softmax(xt, dim=-1, out=y)

        y.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        rel = rel_err(cp, y, case.reference["y"])
        mode = f"torch {torch.__version__} torch.softmax(x, dim=-1, out=y), {case.dtype}"
        return Baseline(name=name, mode=mode, run=run, rel_err=rel)

"""W8A8 FP8: y = (x_q · W_qᵀ) scaled per token and per channel, x and W in FP8 e4m3.

The decode step of an FP8-quantized LLM layer: the batch's activations x (M x K) and the
weights W (N x K) are both e4m3 bytes, each row of x with its own float32 scale (per token)
and each row of W with its own (per output channel); y (M x N) is BF16:

    y[m][n] = sx[m] · sw[n] · Σ_k e4m3(xq[m][k]) · e4m3(Wq[n][k])

This is what ``torch._scaled_mm`` computes with row-wise scales, the baseline.

Kernel ABI (every w8a8 variant's entry point):

    extern "C" __global__ void entry(int M, int N, int K,
                                     const unsigned char* __restrict__ xq,
                                     const float* __restrict__ sx,
                                     const unsigned char* __restrict__ Wq,
                                     const float* __restrict__ sw,
                                     __nv_bfloat16* __restrict__ y)

xq and Wq are row-major bytes (e4m3: 1 sign, 4 exponent bits with bias 7, 3 mantissa bits,
no infinities, 0x7F / 0xFF NaN); K must be a multiple of 16 (16-byte rows, as the FP8
tensor-core paths and cuBLASLt ask). A workspace variant gets its buffer appended.

Inputs: x and a float32 W are standard normals (seeded per size), quantized as an FP8
checkpoint and an FP8 activation quantizer do: a row's scale is its max |value| / 448 (e4m3's
largest finite), the row divided by it and rounded to e4m3 (nearest even, torch's
conversion). The float64 reference is the exact scaled product of the bytes the kernel
reads, so only the kernel's FP32 accumulation and y's bf16 rounding are left: hgemm's 1e-2
norm-wise tolerance holds.
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

E4M3_MAX = 448.0
TOLERANCE = 1e-2


def e4m3_values(xp, bits):
    """uint8 e4m3 bits -> float64 values (exact; NaN for 0x7F and 0xFF)."""
    b = xp.asarray(bits).astype(xp.int64)
    sign = xp.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 0xF
    m = (b & 7).astype(xp.float64)
    normal = sign * (1.0 + m / 8.0) * xp.exp2((e - 7).astype(xp.float64))
    sub = sign * (m / 8.0) * 2.0**-6
    out = xp.where(e == 0, sub, normal)
    return xp.where((b & 0x7F) == 0x7F, xp.nan, out)


def quantize_rows(w):
    """float32 torch tensor (rows x K) -> (e4m3 bytes as a uint8 torch tensor, float32
    per-row scales): scale = max |row| / 448 (1 for a row of zeros), bytes = e4m3(row /
    scale), rounded to nearest even. Runs wherever the tensor is (CPU or CUDA)."""
    import torch

    amax = w.abs().amax(dim=1).to(torch.float32)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    q = (w / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.view(torch.uint8), scale


class W8A8(XWProblem):
    name = "w8a8"
    dtypes = ("float8_e4m3",)
    baselines = {
        "scaled_mm": "torch._scaled_mm(x_q, W_q.t(), scale_a=sx, scale_b=sw, "
        "out_dtype=bfloat16): cuBLASLt FP8 with row-wise scales",
        "cublas_bf16": "cuBLAS BF16 torch.matmul(x, W.t(), out=y) on the same values held in "
        "bf16 (dequantized once, before timing): what the FP8 format saves",
    }
    default_params = {}
    figure_of_merit = "gbps"
    peak = "bf16_tensor"

    def size_error(self, s):
        if s["K"] % 16:
            return f"K = {s['K']} is not a multiple of 16 (16-byte FP8 rows)"
        return None

    # ---- cost model ------------------------------------------------------------------
    def flops(self, s):
        return 2.0 * s["M"] * s["N"] * s["K"]

    def min_bytes(self, s, dtype):
        # x and W's bytes and their scales read once, y written once
        M, N, K = s["M"], s["N"], s["K"]
        return float(M * K + N * K + 4 * (M + N) + 2 * M * N)

    def tolerance(self, s, dtype):
        return TOLERANCE

    def kernel_arg_types(self, dtype: str) -> tuple[str, ...]:
        return ("i32", "i32", "i32", "*u8", "*fp32", "*u8", "*fp32", "*bf16")

    # ---- device side -----------------------------------------------------------------

    def build_case(
        self, xp, sizes, dtype, seed, xf, wf, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        """The case around float32 values ``xf`` (M x K) and ``wf`` (N x K), each row
        quantized to e4m3 with its scale (quantize_rows, by torch where the array is), in
        array module ``xp``: CuPy on the device, NumPy where the CPU tests run it."""
        import numpy as np
        import torch

        if computes is not None:
            raise KeyError(f"w8a8 has no alternative '{computes}'")
        if dtype != "float8_e4m3":
            raise KeyError(f"w8a8 has no dtype '{dtype}'")
        M, N, K = sizes["M"], sizes["N"], sizes["K"]
        device = None if xp is np else "cuda"
        xq, sx = (xp.asarray(t) for t in quantize_rows(torch.as_tensor(xf, device=device)))
        Wq, sw = (xp.asarray(t) for t in quantize_rows(torch.as_tensor(wf, device=device)))
        del xf, wf
        xq, sx, Wq, sw = (xp.ascontiguousarray(a) for a in (xq, sx, Wq, sw))
        y = GuardedArray(xp, M * N, "bfloat16", guard)
        ref = {}
        if reference:
            x64 = e4m3_values(xp, xq) * sx.astype(xp.float64)[:, None]
            w64 = e4m3_values(xp, Wq) * sw.astype(xp.float64)[:, None]
            ref = {"y": (x64 @ w64.T).ravel()}
            del x64, w64
        case = Case(
            sizes=dict(sizes),
            dtype=dtype,
            seed=seed,
            inputs={"xq": xq, "sx": sx, "Wq": Wq, "sw": sw},
            outputs={"y": y},
            reference=ref,
            args=(np.int32(M), np.int32(N), np.int32(K), xq, sx, Wq, sw, y.view),
        )
        return case.ready()

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch

        self.known_baseline(name)
        M, N, K = case.sizes["M"], case.sizes["N"], case.sizes["K"]
        xq = torch.as_tensor(case.inputs["xq"], device="cuda").view(torch.float8_e4m3fn)
        Wq = torch.as_tensor(case.inputs["Wq"], device="cuda").view(torch.float8_e4m3fn)
        sx = torch.as_tensor(case.inputs["sx"], device="cuda").view(M, 1)
        sw = torch.as_tensor(case.inputs["sw"], device="cuda").view(1, N)
        y = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
        if name == "scaled_mm":
            Wt = Wq.view(N, K).t()  # K x N, column-major: what _scaled_mm's second operand wants
            xm = xq.view(M, K)

            def run():
                torch._scaled_mm(xm, Wt, scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, out=y)

            how = (
                f"torch {torch.__version__} _scaled_mm(x_q, W_q.t(), row-wise scale_a (M x 1) "
                "and scale_b (1 x N), out_dtype=bfloat16): cuBLASLt FP8 e4m3, fp32 accumulate"
            )
        else:
            xb = (xq.view(M, K).to(torch.float32) * sx).to(torch.bfloat16)
            wt = (Wq.view(N, K).to(torch.float32) * sw.view(N, 1)).to(torch.bfloat16).t()

            def run():
                torch.matmul(xb, wt, out=y)

            how = (
                f"torch {torch.__version__}: x and W dequantized to bf16 once, before timing; "
                "cuBLAS matmul(x, W.t(), out=y), fp32 accumulate"
            )
        y.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        rel = rel_err(cp, y, case.reference["y"])
        return Baseline(name=name, mode=how, run=run, rel_err=rel)

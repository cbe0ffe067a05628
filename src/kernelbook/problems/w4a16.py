"""W4A16: y = x · Wᵀ with W stored as 4-bit integers and a BF16 scale per group of 128.

The decode step of a weight-only quantized LLM layer: x is the batch's activations in BF16
(M x K), W (N x K) is held in 4 bits a weight and dequantized inside the kernel, y (M x N)
is BF16. Reading W is nearly all the traffic, and it is 4x smaller than BF16's.

Kernel ABI (every w4a16 variant's entry point):

    extern "C" __global__ void entry(int M, int N, int K,
                                     const __nv_bfloat16* __restrict__ x,
                                     const unsigned* __restrict__ Wq,
                                     const __nv_bfloat16* __restrict__ S,
                                     __nv_bfloat16* __restrict__ y)

Format (symmetric, zero point 8, the layout of GPTQ-style kernels without reordering):
- ``Wq`` is N rows of K / 8 32-bit words, row-major; nibble j of word c of row n (bits
  4j..4j+3, the lowest first) is q[n][8c + j], an unsigned 4-bit value;
- ``S`` is N rows of K / 128 bf16 scales; group g of row n covers k in [128g, 128g + 128);
- the weight is w[n][k] = (q[n][k] - 8) · S[n][k / 128], exactly (a 4-bit integer times an
  8-bit mantissa fits FP32, and BF16 too where the scale's low bits allow).

So K must be a multiple of 128 (whole groups, as every int4 GEMM library asks); M and N are
free. A workspace variant gets its buffer appended after these seven arguments.

Alternative ``tiled`` (a variant's ``computes: tiled``): the same y from the same weights,
laid out once, before any timing, in the order a 16-row-tile kernel reads them, as an int4
library repacks a checkpoint at load time (tile_pack). The kernel's Wq and S arguments are
then Wt and St: for each tile of 16 rows (rows past N zero) and each scale group, 1024 bytes,
the 16-byte pieces of lane 4g + t (t < 4) being uint4 number 4 gi + t of row 16 T + g, then
the same for rows 16 T + 8 + g; and the group's 16 scales in 32 bytes, those of rows
16 T + g and 16 T + 8 + g side by side (one 32-bit word). Tiles and groups in order. The
baselines and the reference read the row-major Wq and S as always.

Alternative ``tiled_pairs``: ``tiled`` with the nibbles of every word reordered (PAIRED):
nibbles s and s + 4 (which one shift and one mask turn into a bf16 pair) hold the word's
weights 2s and 2s + 1, so that the pair meets x's elements 2s and 2s + 1, a 32-bit word of
x as it lies in memory, with no byte permutation.

Inputs: x and a float32 W are standard normals (seeded per size); W is quantized group by
group as a real checkpoint is (scale = max |w| / 7 over the group, rounded to bf16; q =
clip(round(w / scale) + 8, 0, 15)). The float64 reference is x · wᵀ over the dequantized
weights the kernel reads, so the only error left is the kernel's: FP32 accumulation and y's
rounding to bf16. Tolerance as hgemm's (1e-2 norm-wise, from the bf16 output rounding).
y is poisoned with bf16 NaN before every launch.
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

GROUP = 128  # weights per scale, along K
ZERO = 8  # q - ZERO is the signed weight
TOLERANCE = 1e-2


def quantize(xp, w):
    """float32 W (N x K, K a multiple of GROUP) -> (Wq: N x K/8 uint32 words, S: N x K/GROUP
    bf16 bits), symmetric per group: scale = max |w| / 7 rounded to bf16, q = round(w /
    scale) + 8 clipped to [0, 15]. A group of zeros gets scale 1 (q = 8)."""
    N, K = w.shape
    if K % GROUP:
        raise ValueError(f"K = {K} is not a multiple of the group size {GROUP}")
    g = w.reshape(N, K // GROUP, GROUP).astype(xp.float32)
    amax = xp.abs(g).max(axis=2)
    scale = xp.where(amax > 0, amax / 7.0, 1.0).astype(xp.float32)
    S = bf16_bits(xp, scale)
    s = bf16_values(xp, S)[:, :, None]
    q = xp.clip(xp.rint(g / s) + ZERO, 0, 15).astype(xp.uint32).reshape(N, K // 8, 8)
    words = xp.zeros((N, K // 8), dtype=xp.uint32)
    for j in range(8):
        words |= q[:, :, j] << xp.uint32(4 * j)
    return words, S


# tiled_pairs: nibble p of a word holds weight PAIRED[p] of its 8 (weights 2s and 2s + 1 in
# nibbles s and s + 4, the two a shift and one mask give as a bf16 pair)
PAIRED = (0, 2, 4, 6, 1, 3, 5, 7)


def pair_nibbles(xp, Wq):
    """Wq's words with their nibbles in the ``tiled_pairs`` order: nibble p of each word is the
    word's weight PAIRED[p]."""
    out = xp.zeros_like(Wq)
    for p, j in enumerate(PAIRED):
        out |= ((Wq >> xp.uint32(4 * j)) & xp.uint32(15)) << xp.uint32(4 * p)
    return out


def tile_pack(xp, Wq, S, pairs=False):
    """(Wt, St): Wq (N x K/8 words) and S (N x K/128 bf16 bits) in the ``tiled`` layout (the
    module's docstring): Wt as 32-bit words, ceil(N/16) x K/128 x 2 x 32 x 4 of them; St as
    bf16 bits, ceil(N/16) x K/128 x 8 x 2 (rows g and g + 8 of the tile side by side, a
    32-bit word a lane). Rows past N are zero (weights and scales). ``pairs``: each word's
    nibbles in the PAIRED order (the ``tiled_pairs`` layout)."""
    if pairs:
        Wq = pair_nibbles(xp, Wq)
    N, words = Wq.shape
    groups = words // 16
    T = -(-N // 16)
    Wp = xp.zeros((T * 16, words), dtype=xp.uint32)
    Wp[:N] = Wq
    Sp = xp.zeros((T * 16, groups), dtype=S.dtype)
    Sp[:N] = S
    # row 16 T + 8 h + g, group gi, piece t (4 words): to (T, gi, h, g, t, word)
    Wt = Wp.reshape(T, 2, 8, groups, 4, 4).transpose(0, 3, 1, 2, 4, 5)
    # row 16 T + 8 h + g, group gi: to (T, gi, g, h), a 32-bit word per g (h = 0 low)
    St = Sp.reshape(T, 2, 8, groups).transpose(0, 3, 2, 1)
    return xp.ascontiguousarray(Wt).reshape(-1), xp.ascontiguousarray(St).reshape(-1)


def dequantized(xp, Wq, S):
    """The float64 weights (N x K) that Wq and S hold: (q - 8) * scale."""
    N, words = Wq.shape
    K = words * 8
    shifts = (xp.arange(8, dtype=xp.uint32) * 4)[None, None, :]
    q = ((Wq[:, :, None] >> shifts) & xp.uint32(15)).reshape(N, K).astype(xp.float64)
    s = bf16_values(xp, S).astype(xp.float64)
    return (q - ZERO).reshape(N, K // GROUP, GROUP) * s[:, :, None]


class W4A16(XWProblem):
    name = "w4a16"
    dtypes = ("bfloat16",)
    baselines = {
        "dequant_matmul": "torch: W dequantized to bf16 every call, then cuBLAS BF16 "
        "torch.matmul(x, W.t(), out=y)",
        "cublas_bf16": "cuBLAS BF16 torch.matmul(x, W.t(), out=y) on the same weights held "
        "in bf16 (dequantized once, before timing): what the 4-bit format saves",
        "tinygemm_int4": "PyTorch's own int4 weight-only kernel (tinygemm, the one torchao's "
        "int4 layout runs): torch._weight_int4pack_mm(x, W packed once, 128, scales and zeros)",
    }
    alternatives = {
        "tiled": "y from W and the scales laid out once, before timing, in the order a "
        "16-row-tile kernel reads them (tile_pack)",
        "tiled_pairs": "tiled, with each word's nibbles reordered so that the pair a shift and "
        "a mask extract is two consecutive weights (tile_pack(pairs=True))",
    }
    # the problem's own y, from the same weights in another layout: a ladder step
    supersets = frozenset({"tiled", "tiled_pairs"})
    default_params = {}
    figure_of_merit = "gbps"
    peak = "bf16_tensor"

    def size_error(self, s):
        if s["K"] % GROUP:
            return f"K = {s['K']} is not a multiple of the quantization group ({GROUP})"
        return None

    # ---- cost model ------------------------------------------------------------------
    def flops(self, s):
        return 2.0 * s["M"] * s["N"] * s["K"]

    def min_bytes(self, s, dtype):
        # x read once, W's nibbles and scales read once, y written once
        M, N, K = s["M"], s["N"], s["K"]
        return float(2 * M * K + N * K // 2 + 2 * N * (K // GROUP) + 2 * M * N)

    def tolerance(self, s, dtype):
        return TOLERANCE

    def kernel_arg_types(self, dtype: str) -> tuple[str, ...]:
        return ("i32", "i32", "i32", "*bf16", "*u32", "*bf16", "*bf16")

    # ---- device side -----------------------------------------------------------------

    def build_case(
        self, xp, sizes, dtype, seed, xf, wf, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        """The case around float32 values ``xf`` (M x K, rounded to bf16) and ``wf`` (N x K,
        quantized) in array module ``xp``: CuPy on the device, NumPy where the CPU tests run
        it."""
        import numpy as np

        if computes is not None and computes not in self.alternatives:
            raise KeyError(f"w4a16 has no alternative '{computes}'")
        if dtype != "bfloat16":
            raise KeyError(f"w4a16 has no dtype '{dtype}'")
        M, N, K = sizes["M"], sizes["N"], sizes["K"]
        x = bf16_bits(xp, xf)
        Wq, S = quantize(xp, wf)
        y = GuardedArray(xp, M * N, "bfloat16", guard)
        ref = {}
        if reference:
            w = dequantized(xp, Wq, S).reshape(N, K)
            ref = {"y": (bf16_values(xp, x).astype(xp.float64) @ w.T).ravel()}
            del w
        inputs = {"x": x, "Wq": Wq, "S": S}
        w, sc = Wq, S  # what the kernel reads
        if computes in ("tiled", "tiled_pairs"):
            w, sc = tile_pack(xp, Wq, S, pairs=computes == "tiled_pairs")
            inputs.update(Wt=w, St=sc)
        case = Case(
            sizes=dict(sizes),
            dtype=dtype,
            seed=seed,
            inputs=inputs,
            outputs={"y": y},
            reference=ref,
            args=(np.int32(M), np.int32(N), np.int32(K), x, w, sc, y.view),
        )
        return case.ready()

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch

        self.known_baseline(name)
        M, N, K = case.sizes["M"], case.sizes["N"], case.sizes["K"]
        x = torch_bf16(case.inputs["x"], M, K)
        Wq = torch.as_tensor(case.inputs["Wq"].view(cp.int32), device="cuda")  # N x K/8
        S = torch_bf16(case.inputs["S"], N, K // GROUP, 1)
        shifts = torch.arange(0, 32, 4, dtype=torch.int32, device="cuda")
        y = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")

        def dequant():
            q = (Wq.unsqueeze(-1) >> shifts) & 15  # N x K/8 x 8, nibble j of word c
            return ((q.view(N, K // GROUP, GROUP) - ZERO).to(torch.bfloat16) * S).view(N, K)

        if name == "dequant_matmul":

            def run():
                torch.matmul(x, dequant().t(), out=y)

        elif name == "tinygemm_int4":
            run, last = _tinygemm(torch, x, Wq, S, shifts)
        else:
            wt = dequant().t()

            def run():
                torch.matmul(x, wt, out=y)

        y.fill_(float("nan"))
        run()
        if name == "tinygemm_int4":
            y.copy_(last())  # the op allocates its output; the copy stays out of the timing
        torch.cuda.synchronize()
        rel = rel_err(cp, y, case.reference["y"])
        if name == "tinygemm_int4":
            if not rel < TOLERANCE:  # a packing this torch reads otherwise: not a baseline
                raise ValueError(
                    f"torch {torch.__version__}'s _weight_int4pack_mm gives rel_err {rel:.3g} "
                    f"on these weights (tolerance {TOLERANCE}): its int4 packing differs"
                )
            mode = (
                f"torch {torch.__version__}: _weight_int4pack_mm (tinygemm), W repacked once "
                "before timing (_convert_weight_to_int4pack, inner k tiles 8), scales with "
                "zero offsets 0 (w = (q - 8) * scale), bf16 in/out"
            )
            return Baseline(name=name, mode=mode, run=run, rel_err=rel)
        how = (
            "unpack (shift, mask), (q - 8) to bf16 times the group's scale, every call, then"
            if name == "dequant_matmul"
            else "W dequantized to bf16 once, before timing; cuBLAS"
        )
        mode = (
            f"torch {torch.__version__}: {how} matmul(x, W.t(), out=y), bf16 in/out, "
            "fp32 accumulate"
        )
        return Baseline(name=name, mode=mode, run=run, rel_err=rel)


def tinygemm_operands(torch, q, S):
    """tinygemm's operands from nibbles ``q`` (N x K, values 0..15, int32) and scales ``S``
    (N x K/128 bf16): q as bytes of two nibbles, the even k high (what
    _convert_weight_to_int4pack reads since torch 2.5), and the scales with a zero offset of 0
    each, as K/128 x N x 2 (tinygemm dequantizes (q - 8) * scale + zero)."""
    n = q.shape[0]
    q8 = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)
    s = S.reshape(n, -1)
    sz = torch.stack([s, torch.zeros_like(s)], dim=2).transpose(0, 1).contiguous()
    return q8, sz


def _tinygemm(torch, x, Wq, S, shifts):
    """(run, last) of the tinygemm_int4 baseline: W repacked once, before timing; each run()
    is the one kernel, its output (the op allocates it) kept for last()."""
    N = Wq.shape[0]
    q = ((Wq.unsqueeze(-1) >> shifts) & 15).view(N, -1)  # N x K, nibble j of word c at 8c + j
    q8, sz = tinygemm_operands(torch, q, S)
    packed = torch.ops.aten._convert_weight_to_int4pack(q8, 8)
    del q, q8
    out = {}

    def run():
        out["y"] = torch.ops.aten._weight_int4pack_mm(x, packed, GROUP, sz)

    return run, lambda: out["y"]

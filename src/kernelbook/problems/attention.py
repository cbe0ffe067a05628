"""Scaled dot-product attention, forward: O = softmax(Q·Kᵀ·scale + mask)·V, bfloat16.

Q, K, V and O are [B, H, S, D] bfloat16, contiguous; scale = 1/√D; with ``causal`` = 1 the
mask is -inf above the diagonal (key j > query i). The softmax statistics (row max, row sum)
are kept in float32 by every variant.

Sizes: B, H, S, D and ``causal`` (0 or 1), so a study sweeps both regimes in its size groups.

Kernel ABI (every attention variant's entry point; D is a run-time argument, a kernel that
supports only some head sizes says so with ``requires``, e.g. ``D == 64 or D == 128``):

    extern "C" __global__ void entry(int B, int H, int S, int D, float scale, int causal,
                                     const bf16* Q, const bf16* K, const bf16* V,
                                     bf16* O, float* L)

L is [B, H, S] float32, the natural-log logsumexp of each scaled, masked score row:
L[b,h,i] = log Σ_j exp(scale·q_i·k_j) over the unmasked j. FlashAttention keeps it for the
backward pass. A variant that writes it declares ``computes: o_and_lse``: L is then poisoned
with NaN before each launch and checked like O. Without it, L is a scratch buffer of the same
size that the kernel may ignore (it is not checked).

bfloat16 without a bfloat16 array type: as in softmax, bf16 buffers are uint16 arrays holding
the bits; inputs are standard normals rounded to bf16 on the device, O is poisoned with bf16
NaN before every launch.

Reference: float64 on the device, in chunks of queries over all (b, h) at once, so the score
block held at a time stays under ~256 MiB whatever S is (at S = 16384, B·H = 16: 128 queries a
chunk).

Tolerance (norm-wise relative, float64 reference): 1e-2. O's own rounding to bf16 is 2⁻⁹
relative per element (~2e-3 norm-wise); a FlashAttention-2 kernel also rounds P to bf16 before
P·V (another ~2e-3, random across keys); float32 accumulation adds ~1e-6. The bound leaves ~3x
over the sum. L is float32 from exact bf16 products accumulated in float32: its error is
~1e-6 relative, far inside the same bound.

FLOPs: the FlashAttention convention, 4·B·H·S²·D (two matmuls), halved when causal (the
softmax's exps are not counted).
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

REF_CHUNK_BYTES = 256 << 20  # float64 scores held at once by the reference


def attention64(xp, q, k, v, causal: bool, scale: float, chunk_bytes: int = REF_CHUNK_BYTES):
    """float64 attention of [BH, S, D] arrays (any float type): (O [BH, S, D], L [BH, S])."""
    BH, S, D = q.shape
    q64, k64, v64 = (a.astype(xp.float64) for a in (q, k, v))
    o = xp.empty((BH, S, D), dtype=xp.float64)
    lse = xp.empty((BH, S), dtype=xp.float64)
    rows = max(1, chunk_bytes // (8 * BH * S))
    kt = k64.transpose(0, 2, 1)
    for i0 in range(0, S, rows):
        i1 = min(S, i0 + rows)
        s = xp.matmul(q64[:, i0:i1], kt) * scale  # [BH, rows, S]
        if causal:
            qi = xp.arange(i0, i1).reshape(-1, 1)
            kj = xp.arange(S).reshape(1, -1)
            s = xp.where(kj > qi, -xp.inf, s)
        m = s.max(axis=2, keepdims=True)
        p = xp.exp(s - m)
        del s
        den = p.sum(axis=2, keepdims=True)
        o[:, i0:i1] = xp.matmul(p, v64) / den
        lse[:, i0:i1] = (m + xp.log(den))[..., 0]
        del p
    return o, lse


class Attention(Problem):
    name = "attention"
    size_names = ("B", "H", "S", "D", "causal")
    zero_sizes = ("causal",)
    sweep_facets = ("S", ("D", "causal"))
    dtypes = ("bfloat16",)
    baselines = {
        "sdpa_flash": "torch scaled_dot_product_attention, SDPBackend.FLASH_ATTENTION",
        "sdpa_cudnn": "torch scaled_dot_product_attention, SDPBackend.CUDNN_ATTENTION",
    }
    default_params = {}
    alternatives = {"o_and_lse": "O and the row logsumexp L [B, H, S] float32, both checked"}
    supersets = frozenset({"o_and_lse"})
    figure_of_merit = "tflops"
    peak = "bf16_tensor"  # the FA2 steps run on BF16 tensor cores: their roof is that peak

    def matrices(self, s: dict[str, int]) -> dict[str, tuple[int, int]]:
        """Q, K, V and O as the 2-D row-major matrices a tensor map describes (config
        `tma:`): every (b, h)'s S rows stacked, D columns."""
        rows = s["B"] * s["H"] * s["S"]
        return {name: (rows, s["D"]) for name in ("Q", "K", "V", "O")}

    # ---- cost model ------------------------------------------------------------------
    def flops(self, s):
        f = 4.0 * s["B"] * s["H"] * s["S"] * s["S"] * s["D"]
        return f / 2 if s["causal"] else f

    def min_bytes(self, s, dtype):
        # Q, K, V read once, O written once (bf16); L (float32) not counted
        return float(4 * s["B"] * s["H"] * s["S"] * s["D"] * 2)

    def tolerance(self, s, dtype):
        return 1e-2

    # ---- device side -----------------------------------------------------------------
    def setup(
        self, sizes, dtype, params, seed, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        import cupy as cp

        rng = cp.random.Generator(cp.random.XORWOW(size_seed(seed, sizes)))
        n = sizes["B"] * sizes["H"] * sizes["S"] * sizes["D"]
        qkv = [rng.standard_normal(n, dtype=cp.float32) for _ in range(3)]
        return self.build_case(cp, sizes, dtype, seed, qkv, guard, reference, computes)

    def build_case(
        self, xp, sizes, dtype, seed, qkv, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        """The case around float32 values ``qkv`` (three flat B·H·S·D arrays, rounded to
        bf16) in array module ``xp``: CuPy on the device, NumPy in the CPU tests."""
        import numpy as np

        if computes is not None and computes not in self.alternatives:
            raise KeyError(f"attention has no alternative '{computes}'")
        if dtype != "bfloat16":
            raise KeyError(f"attention has no dtype '{dtype}'")
        if sizes["causal"] not in (0, 1):
            raise ValueError(f"attention: causal must be 0 or 1, not {sizes['causal']}")
        B, H, S, D = (sizes[k] for k in ("B", "H", "S", "D"))
        q, k, v = (bf16_bits(xp, a) for a in qkv)
        del qkv
        o = GuardedArray(xp, B * H * S * D, "bfloat16", guard)
        lse = GuardedArray(xp, B * H * S, xp.float32, guard)
        outputs = {"O": o}
        if computes == "o_and_lse":
            outputs["L"] = lse
        ref = {}
        scale = 1.0 / math.sqrt(D)
        if reference:
            shape = (B * H, S, D)
            o64, l64 = attention64(
                xp,
                *(bf16_values(xp, a).reshape(shape) for a in (q, k, v)),
                bool(sizes["causal"]),
                scale,
            )
            ref = {"O": o64.ravel()}
            if "L" in outputs:
                ref["L"] = l64.ravel()
            del o64, l64
        case = Case(
            sizes=dict(sizes),
            dtype=dtype,
            seed=seed,
            inputs={"Q": q, "K": k, "V": v},
            outputs=outputs,
            reference=ref,
            args=(
                np.int32(B),
                np.int32(H),
                np.int32(S),
                np.int32(D),
                np.float32(scale),
                np.int32(sizes["causal"]),
                q,
                k,
                v,
                o.view,
                lse.view,
            ),
        )
        case.scratch = lse  # keep L alive when it is not an output
        return case.ready()

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends = {
            "sdpa_flash": SDPBackend.FLASH_ATTENTION,
            "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
        }
        self.known_baseline(name)
        B, H, S, D = (case.sizes[k] for k in ("B", "H", "S", "D"))
        causal = bool(case.sizes["causal"])
        q, k, v = (torch_bf16(case.inputs[n], B, H, S, D) for n in ("Q", "K", "V"))
        backend = backends[name]
        out = {}

        def run():
            with sdpa_kernel(backend):
                out["O"] = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=causal, scale=1.0 / math.sqrt(D)
                )

        run()
        torch.cuda.synchronize()
        rel = rel_err(cp, out.pop("O"), case.reference["O"])
        mode = (
            f"torch {torch.__version__} scaled_dot_product_attention(is_causal={causal}), "
            f"sdpa_kernel({backend.name}), bfloat16"
        )
        return Baseline(name=name, mode=mode, run=run, rel_err=rel)

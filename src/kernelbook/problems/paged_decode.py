"""Paged decode attention: one query token per sequence against a KV cache held in pages.

The decode step of a served LLM with grouped-query attention: each of B sequences has one new
query token (HQ = 32 heads of D = 128) and a cache of its earlier tokens' keys and values
(HKV = 8 heads, so 4 query heads share each KV head). The cache lives in pages of P = 16
tokens drawn from a shared pool in no order; a block table maps each sequence's page i to a
page of the pool. Sizes: B, and L, the longest sequence; the others are shorter (lengths()).

Kernel ABI (every paged_decode variant's entry point):

    extern "C" __global__ void entry(int B, int L, int max_pages,
                                     const int* __restrict__ lens,        // [B]
                                     const int* __restrict__ table,       // [B][max_pages]
                                     const __nv_bfloat16* __restrict__ q, // [B][HQ][D]
                                     const __nv_bfloat16* __restrict__ kc,// [pages][P][HKV][D]
                                     const __nv_bfloat16* __restrict__ vc,// [pages][P][HKV][D]
                                     __nv_bfloat16* __restrict__ o)       // [B][HQ][D]

(the cache layout of vLLM's: a token's key for one head is 256 contiguous bytes). Query
head h reads KV head h / 4; scores are scaled by 1/sqrt(D). Entries of the block table past
a sequence's pages are -1. A workspace variant gets its buffer appended.

Inputs: q, K and V are standard normals rounded to bf16 (seeded per size); the pool holds
exactly the pages the sequences use, shuffled. The float64 reference is softmax(q·Kᵀ/√D)·V
of those bf16 values per sequence and head, so only the kernel's FP32 arithmetic and o's
bf16 rounding are left: 1e-2 norm-wise, as attention's. o is poisoned with bf16 NaN.
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

HQ, HKV, D, P = 32, 8, 128, 16
TOLERANCE = 1e-2


def lengths(B: int, L: int) -> list[int]:
    """The B sequences' KV lengths: the first is L, the others spread over [L/2, L] by a
    fixed hash of their index (the same for every run and seed, so the cost model knows
    them). So a batch mixes lengths, and no length is a multiple of the page but by chance."""
    out = [L]
    for b in range(1, B):
        h = (b * 2654435761) % 2**32  # Knuth's multiplicative hash, then a 32-bit mix
        h ^= h >> 16
        h = (h * 0x45D9F3B) % 2**32
        h ^= h >> 16
        out.append(max(1, L - h % (L // 2 + 1)))
    return out


def attend64(xp, q, k, v):
    """float64 decode attention of one sequence: q [HQ, D], k and v [len, HKV, D]."""
    scale = 1.0 / math.sqrt(D)
    kk = xp.repeat(k.transpose(1, 0, 2), HQ // HKV, axis=0)  # [HQ, len, D]
    vv = xp.repeat(v.transpose(1, 0, 2), HQ // HKV, axis=0)
    s = xp.einsum("hd,hnd->hn", q, kk) * scale
    s -= s.max(axis=1, keepdims=True)
    p = xp.exp(s)
    p /= p.sum(axis=1, keepdims=True)
    return xp.einsum("hn,hnd->hd", p, vv)


class PagedDecode(Problem):
    name = "paged_decode"
    size_names = ("B", "L")
    dtypes = ("bfloat16",)
    baselines = {
        "sdpa_padded": "torch scaled_dot_product_attention(enable_gqa=True) over the cache "
        "gathered once (before timing) into padded [B, HKV, L, D] tensors, a mask for the "
        "shorter sequences",
    }
    default_params = {}
    figure_of_merit = "gbps"
    peak = "bf16_tensor"

    # ---- cost model ------------------------------------------------------------------
    def tokens(self, s) -> int:
        return sum(lengths(s["B"], s["L"]))

    def flops(self, s):
        return 4.0 * self.tokens(s) * HQ * D  # q·k and p·v, 2 FLOP a multiply-add

    def min_bytes(self, s, dtype):
        # every cached key and value read once, q read and o written once (bf16); the block
        # table (4 bytes a page) and lengths
        B, L = s["B"], s["L"]
        pages = sum(-(-n // P) for n in lengths(B, L))
        return float(2 * self.tokens(s) * HKV * D * 2 + 2 * 2 * B * HQ * D + 4 * (pages + B))

    def tolerance(self, s, dtype):
        return TOLERANCE

    # ---- device side -----------------------------------------------------------------
    def setup(
        self, sizes, dtype, params, seed, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        import cupy as cp

        rng = cp.random.Generator(cp.random.XORWOW(size_seed(seed, sizes)))
        return self.build_case(cp, sizes, dtype, seed, rng, guard, reference, computes)

    def build_case(
        self, xp, sizes, dtype, seed, rng, guard=GUARD_ELEMENTS, reference=True, computes=None
    ) -> Case:
        """The case in array module ``xp`` (CuPy on the device, NumPy in the CPU tests), its
        random values from ``rng`` (a Generator of that module)."""
        import numpy as np

        if computes is not None:
            raise KeyError(f"paged_decode has no alternative '{computes}'")
        if dtype != "bfloat16":
            raise KeyError(f"paged_decode has no dtype '{dtype}'")
        B, L = sizes["B"], sizes["L"]
        lens = lengths(B, L)
        max_pages = -(-L // P)
        counts = [-(-n // P) for n in lens]
        total = sum(counts)
        perm = np.random.default_rng(size_seed(seed, sizes) % 2**32).permutation(total)
        table = np.full((B, max_pages), -1, dtype=np.int32)
        at = 0
        for b, c in enumerate(counts):
            table[b, :c] = perm[at : at + c]
            at += c

        def normal(n):
            return rng.standard_normal(n, dtype=xp.float32)

        q = bf16_bits(xp, normal(B * HQ * D))
        kc = bf16_bits(xp, normal(total * P * HKV * D))
        vc = bf16_bits(xp, normal(total * P * HKV * D))
        o = GuardedArray(xp, B * HQ * D, "bfloat16", guard)
        ref = {}
        if reference:
            qv = bf16_values(xp, q).astype(xp.float64).reshape(B, HQ, D)
            kv = bf16_values(xp, kc).reshape(total, P, HKV, D)
            vv = bf16_values(xp, vc).reshape(total, P, HKV, D)
            outs = []
            for b in range(B):
                pages = xp.asarray(table[b, : counts[b]])
                k = kv[pages].reshape(-1, HKV, D)[: lens[b]].astype(xp.float64)
                v = vv[pages].reshape(-1, HKV, D)[: lens[b]].astype(xp.float64)
                outs.append(attend64(xp, qv[b], k, v))
                del k, v
            ref = {"O": xp.stack(outs).ravel()}
            del kv, vv, outs
        lens_d = xp.asarray(np.asarray(lens, dtype=np.int32))
        table_d = xp.asarray(table)
        case = Case(
            sizes=dict(sizes),
            dtype=dtype,
            seed=seed,
            inputs={"lens": lens_d, "table": table_d, "Q": q, "K": kc, "V": vc},
            outputs={"O": o},
            reference=ref,
            args=(
                *(np.int32(B), np.int32(L), np.int32(max_pages)),
                *(lens_d, table_d, q, kc, vc, o.view),
            ),
        )
        return case.ready()

    def baseline(self, case: Case, name: str, params) -> Baseline:
        import cupy as cp
        import torch

        self.known_baseline(name)
        B, L = case.sizes["B"], case.sizes["L"]
        lens = lengths(B, L)
        q = torch_bf16(case.inputs["Q"], B, HQ, 1, D)
        pool_k = torch_bf16(case.inputs["K"], -1, P, HKV, D)
        pool_v = torch_bf16(case.inputs["V"], -1, P, HKV, D)
        table = torch.as_tensor(case.inputs["table"], device="cuda").long()
        mp = table.shape[1]
        # gathered once: [B, max_pages * P, HKV, D] -> [B, HKV, L, D]; pages past a sequence's
        # end (-1) read page 0 and are masked
        idx = table.clamp(min=0)
        k = pool_k[idx].view(B, mp * P, HKV, D)[:, :L].permute(0, 2, 1, 3).contiguous()
        v = pool_v[idx].view(B, mp * P, HKV, D)[:, :L].permute(0, 2, 1, 3).contiguous()
        pos = torch.arange(L, device="cuda")
        mask = (pos[None, :] < torch.tensor(lens, device="cuda")[:, None]).view(B, 1, 1, L)
        out = {}

        def run():
            out["O"] = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(D), enable_gqa=True
            )

        run()
        torch.cuda.synchronize()
        rel = rel_err(cp, out.pop("O"), case.reference["O"])
        mode = (
            f"torch {torch.__version__} scaled_dot_product_attention(attn_mask, enable_gqa=True), "
            "bfloat16, over K and V gathered from the pages once, before timing"
        )
        return Baseline(name=name, mode=mode, run=run, rel_err=rel)

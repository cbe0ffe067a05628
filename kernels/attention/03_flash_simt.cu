// Step 03: FlashAttention-1-style tiling with online softmax, SIMT (no tensor cores).
//
// What changed from 02: a block owns BM = 64 queries (one per thread) instead of one, and
// walks K and V in tiles of BN = 8 keys staged in shared memory; each thread keeps its q
// (bf16 pairs, in its own padded shared-memory row: registers go to o) and its output row o
// (float32) in registers and updates a running max m and
// sum l per tile: o ← o·e^(m_old − m_new) + Σ_j e^(s_j − m_new)·v_j (online softmax).
// Why it helps: every K/V element loaded from global memory is used by 64 queries instead of
// 1 (64x less L2/DRAM traffic than 02), the score row needs no shared memory whatever S is,
// and the K/V reads from shared memory are warp-wide broadcasts (conflict-free).
// What ncu should show: FFMA-bound (FP32 pipe busy, no HMMA), ~2 shared loads per 4 FFMAs
// (the MIO/LSU pipe next), low DRAM throughput; o (D floats) and s (BN) in registers, no spills.
#include <cuda_bf16.h>
#include <stdint.h>

#define BM 64
#define BN 8

template <int D>
__device__ __forceinline__ void body(int S, float scale, int causal, const __nv_bfloat16* Q,
                                     const __nv_bfloat16* K, const __nv_bfloat16* V,
                                     __nv_bfloat16* O, float* L, __nv_bfloat16* sK,
                                     __nv_bfloat16* sV, __nv_bfloat162* sQ) {
    const size_t bh = blockIdx.y;
    const int i = blockIdx.x * BM + threadIdx.x;  // this thread's query
    const int iq = min(i, S - 1);                 // rows past S compute a copy, store nothing
    Q += bh * S * D;
    K += bh * S * D;
    V += bh * S * D;
    __nv_bfloat162* q = sQ + threadIdx.x * (D / 2 + 1);  // own row; odd stride: no conflicts
    const float sl2 = scale * 1.4426950408889634f;
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
        uint4 v = *reinterpret_cast<const uint4*>(Q + (size_t)iq * D + 8 * c);
        const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int e = 0; e < 4; ++e) q[4 * c + e] = p[e];  // read back by this thread only
    }
    float o[D];
#pragma unroll
    for (int d = 0; d < D; ++d) o[d] = 0.f;
    float m = -INFINITY, l = 0.f;
    const int blast = min(S - 1, blockIdx.x * BM + BM - 1);  // the block's last query
    const int kend = causal ? blast + 1 : S;
    for (int k0 = 0; k0 < kend; k0 += BN) {
        __syncthreads();
        for (int c = threadIdx.x; c < BN * D / 8; c += BM) {
            int r = c / (D / 8), col = (c % (D / 8)) * 8;
            bool ok = k0 + r < S;
            uint4 z = make_uint4(0, 0, 0, 0);
            reinterpret_cast<uint4*>(sK)[c] =
                ok ? *reinterpret_cast<const uint4*>(K + (size_t)(k0 + r) * D + col) : z;
            reinterpret_cast<uint4*>(sV)[c] =
                ok ? *reinterpret_cast<const uint4*>(V + (size_t)(k0 + r) * D + col) : z;
        }
        __syncthreads();
        float s[BN];
        float mt = -INFINITY;
#pragma unroll
        for (int j = 0; j < BN; ++j) {
            const __nv_bfloat162* k = reinterpret_cast<const __nv_bfloat162*>(sK + j * D);
            float acc = 0.f;
#pragma unroll 4
            for (int d = 0; d < D / 2; ++d) {
                float2 kv = __bfloat1622float2(k[d]);
                float2 qv = __bfloat1622float2(q[d]);
                acc = fmaf(qv.x, kv.x, fmaf(qv.y, kv.y, acc));
            }
            int kj = k0 + j;
            s[j] = (kj >= S || (causal && kj > iq)) ? -INFINITY : acc * sl2;
            mt = fmaxf(mt, s[j]);
        }
        float mn = fmaxf(m, mt);
        float mu = mn == -INFINITY ? 0.f : mn;
        float alpha = exp2f(m - mu);
        m = mn;
        l *= alpha;
#pragma unroll
        for (int d = 0; d < D; ++d) o[d] *= alpha;
#pragma unroll
        for (int j = 0; j < BN; ++j) {
            float p = exp2f(s[j] - mu);
            l += p;
            const __nv_bfloat162* v = reinterpret_cast<const __nv_bfloat162*>(sV + j * D);
#pragma unroll
            for (int d = 0; d < D / 2; ++d) {
                float2 vv = __bfloat1622float2(v[d]);
                o[2 * d] = fmaf(p, vv.x, o[2 * d]);
                o[2 * d + 1] = fmaf(p, vv.y, o[2 * d + 1]);
            }
        }
    }
    if (i >= S) return;
    const float inv = 1.f / l;
    __nv_bfloat162* orow = reinterpret_cast<__nv_bfloat162*>(O + (bh * S + i) * D);
#pragma unroll
    for (int d = 0; d < D / 2; ++d) orow[d] = __floats2bfloat162_rn(o[2 * d] * inv, o[2 * d + 1] * inv);
    L[bh * S + i] = (m + log2f(l)) * 0.6931471805599453f;
}

extern "C" __global__ void __launch_bounds__(BM)
    attn_flash_simt(int B, int H, int S, int D, float scale, int causal, const __nv_bfloat16* Q,
                    const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O, float* L) {
    __shared__ __align__(16) __nv_bfloat16 sK[BN * 128], sV[BN * 128];
    __shared__ __nv_bfloat162 sQ[BM * (128 / 2 + 1)];
    if (D == 64)
        body<64>(S, scale, causal, Q, K, V, O, L, sK, sV, sQ);
    else if (D == 128)
        body<128>(S, scale, causal, Q, K, V, O, L, sK, sV, sQ);
}

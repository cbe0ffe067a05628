// The FlashAttention-2 forward kernel body shared by steps 04-06 (each step's .cu file sets
// its compile-time switches and says what it changes). ABI: see src/kernelbook/problems/
// attention.py. One thread block owns BM = 16 * WARPS consecutive queries of one (b, h); each
// warp owns 16 of them, keeps their Q as mma A fragments in registers, and loops over the keys
// in tiles of BN = 64: S = Q·Kᵀ (mma.sync m16n8k16, K fragments by ldmatrix), online softmax
// on the S fragments in registers (row max and sum across the 4 threads of a quad), P rounded
// to bf16 and reused in place as the A operand of O += P·V (V fragments by ldmatrix.trans).
//
// Switches (defines): FA_SWIZZLE (16-byte chunks XOR-swizzled by row instead of padded rows),
// FA_ASYNC (K/V tiles by cp.async into two stages, the next tile loading during this one's
// math), FA_CAUSAL_SKIP (a causal block stops at its diagonal tile, masks only near it).
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef WARPS
#define WARPS 4
#endif
#ifndef FA_SWIZZLE
#define FA_SWIZZLE 0
#endif
#ifndef FA_ASYNC
#define FA_ASYNC 0
#endif
#ifndef FA_CAUSAL_SKIP
#define FA_CAUSAL_SKIP 0
#endif

namespace fa {

constexpr int BN = 64;
constexpr int BM = 16 * WARPS;
constexpr int NT = 32 * WARPS;
constexpr int STAGES = FA_ASYNC ? 2 : 1;

// element offset of (row, col) in a tile with D columns; col a multiple of 8 (16-byte chunk)
template <int D>
__device__ __forceinline__ int off(int row, int col) {
#if FA_SWIZZLE
    return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
#else
    return row * (D + 8) + col;
#endif
}
template <int D>
__host__ __device__ constexpr int tile_elems(int rows) {
    return FA_SWIZZLE ? rows * D : rows * (D + 8);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                        uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                          uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// rows [r0, r0 + ROWS) of a [S, D] matrix into a tile; rows at or past S read as zeros
template <int D, int ROWS>
__device__ __forceinline__ void load_tile(__nv_bfloat16* dst, const __nv_bfloat16* src, int r0,
                                          int S) {
    constexpr int CH = D / 8;  // 16-byte chunks a row
    for (int c = threadIdx.x; c < ROWS * CH; c += NT) {
        int r = c / CH, col = (c % CH) * 8;
        bool ok = r0 + r < S;
        const __nv_bfloat16* g = src + (size_t)(ok ? r0 + r : 0) * D + col;
        __nv_bfloat16* s = dst + off<D>(r, col);
#if FA_ASYNC
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(s)),
                     "l"(g), "r"(ok ? 16 : 0));
#else
        uint4 v = ok ? *reinterpret_cast<const uint4*>(g) : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(s) = v;
#endif
    }
}
__device__ __forceinline__ void async_commit() {
#if FA_ASYNC
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void async_wait() {
#if FA_ASYNC
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

template <int D>
__device__ __forceinline__ void body(int S, float scale, int causal, const __nv_bfloat16* Q,
                                     const __nv_bfloat16* K, const __nv_bfloat16* V,
                                     __nv_bfloat16* O, float* L, char* smem) {
    constexpr int KD = D / 16;  // k-steps of Q·Kᵀ
    constexpr int NB = BN / 8;  // n-blocks of S
    constexpr int DB = D / 8;   // n-blocks of O
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const size_t bh = blockIdx.y;
#if FA_CAUSAL_SKIP
    // causal: the last query blocks have the most tiles; start them first (even tail)
    const int q0 = (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;
#else
    const int q0 = blockIdx.x * BM;
#endif
    Q += bh * S * D;
    K += bh * S * D;
    V += bh * S * D;
    O += bh * S * D;
    L += bh * S;

    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
    __nv_bfloat16* sK = sQ + tile_elems<D>(BM);
    __nv_bfloat16* sV = sK + STAGES * tile_elems<D>(BN);

    int ntiles = (S + BN - 1) / BN;
#if FA_CAUSAL_SKIP
    if (causal) ntiles = min(ntiles, (q0 + BM + BN - 1) / BN);
#endif

    load_tile<D, BM>(sQ, Q, q0, S);
#if FA_ASYNC
    load_tile<D, BN>(sK, K, 0, S);
    load_tile<D, BN>(sV, V, 0, S);
    async_commit();
    async_wait<0>();  // Q (and the first K/V tile) landed
#endif
    __syncthreads();

    // this warp's 16 query rows as A fragments (rows lane%8 (+8), cols +0/+8 by lane/16)
    uint32_t qf[KD][4];
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
        int r = warp * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        int c = kk * 16 + ((lane >> 4) << 3);
        ldsm_x4(smem_u32(sQ + off<D>(r, c)), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
    }

    float acc[DB][4];
#pragma unroll
    for (int d = 0; d < DB; ++d) acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const float sl2 = scale * 1.4426950408889634f;  // scores in the log2 domain
    const int qi[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

    for (int j = 0; j < ntiles; ++j) {
        const int st = FA_ASYNC ? (j & 1) : 0;
        __nv_bfloat16* tK = sK + st * tile_elems<D>(BN);
        __nv_bfloat16* tV = sV + st * tile_elems<D>(BN);
#if FA_ASYNC
        if (j + 1 < ntiles) {
            load_tile<D, BN>(sK + (st ^ 1) * tile_elems<D>(BN), K, (j + 1) * BN, S);
            load_tile<D, BN>(sV + (st ^ 1) * tile_elems<D>(BN), V, (j + 1) * BN, S);
            async_commit();
            async_wait<1>();
        } else {
            async_wait<0>();
        }
#else
        load_tile<D, BN>(tK, K, j * BN, S);
        load_tile<D, BN>(tV, V, j * BN, S);
#endif
        __syncthreads();

        float s[NB][4];
#pragma unroll
        for (int n = 0; n < NB; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
#pragma unroll
            for (int p = 0; p < NB / 2; ++p) {
                uint32_t b0, b1, b2, b3;
                int r = p * 16 + (lane & 7) + ((lane >> 4) << 3);
                int c = kk * 16 + (((lane >> 3) & 1) << 3);
                ldsm_x4(smem_u32(tK + off<D>(r, c)), b0, b1, b2, b3);
                mma16816(s[2 * p], qf[kk], b0, b1);
                mma16816(s[2 * p + 1], qf[kk], b2, b3);
            }
        }

        // mask keys past S, and above the diagonal when causal, only in tiles that need it
        const int k0 = j * BN;
        const bool edge = k0 + BN > S;
        const bool diag = causal && k0 + BN - 1 > q0 + warp * 16;
        if (edge || diag) {
#pragma unroll
            for (int n = 0; n < NB; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    int kj = k0 + n * 8 + 2 * t + (e & 1);
                    int qr = qi[e >> 1];
                    if (kj >= S || (causal && kj > qr)) s[n][e] = -INFINITY;
                }
        }

        float alpha[2], mu[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < NB; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mn = fmaxf(m[h], mx * sl2);
            mu[h] = mn == -INFINITY ? 0.f : mn;  // a row with nothing unmasked yet
            alpha[h] = exp2f(m[h] - mu[h]);
            m[h] = mn;
        }
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int n = 0; n < NB; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float p = exp2f(s[n][e] * sl2 - mu[e >> 1]);
                s[n][e] = p;
                rs[e >> 1] += p;
            }
        l[0] = l[0] * alpha[0] + rs[0];
        l[1] = l[1] * alpha[1] + rs[1];
#pragma unroll
        for (int d = 0; d < DB; ++d) {
            acc[d][0] *= alpha[0];
            acc[d][1] *= alpha[0];
            acc[d][2] *= alpha[1];
            acc[d][3] *= alpha[1];
        }

        // O += P·V: the S accumulators of n-blocks 2k, 2k+1 are the A fragment of k-step k
#pragma unroll
        for (int k = 0; k < BN / 16; ++k) {
            uint32_t a[4] = {pack_bf16(s[2 * k][0], s[2 * k][1]),
                             pack_bf16(s[2 * k][2], s[2 * k][3]),
                             pack_bf16(s[2 * k + 1][0], s[2 * k + 1][1]),
                             pack_bf16(s[2 * k + 1][2], s[2 * k + 1][3])};
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                uint32_t b0, b1, b2, b3;
                int r = k * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                int c = dp * 16 + ((lane >> 4) << 3);
                ldsm_x4_t(smem_u32(tV + off<D>(r, c)), b0, b1, b2, b3);
                mma16816(acc[2 * dp], a, b0, b1);
                mma16816(acc[2 * dp + 1], a, b2, b3);
            }
        }
        __syncthreads();  // the stage is refilled next
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (qi[h] >= S) continue;
        float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
        __nv_bfloat16* orow = O + (size_t)qi[h] * D;
#pragma unroll
        for (int d = 0; d < DB; ++d)
            *reinterpret_cast<uint32_t*>(orow + d * 8 + 2 * t) =
                pack_bf16(acc[d][2 * h] * inv, acc[d][2 * h + 1] * inv);
        if (t == 0) L[qi[h]] = (m[h] + log2f(l[h])) * 0.6931471805599453f;
    }
}

}  // namespace fa

#define FA2_ENTRY(name)                                                                     \
    extern "C" __global__ void __launch_bounds__(fa::NT)                                    \
        name(int B, int H, int S, int D, float scale, int causal, const __nv_bfloat16* Q,   \
             const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O, float* L) { \
        extern __shared__ __align__(128) char smem[];                                       \
        if (D == 64)                                                                        \
            fa::body<64>(S, scale, causal, Q, K, V, O, L, smem);                            \
        else if (D == 128)                                                                  \
            fa::body<128>(S, scale, causal, Q, K, V, O, L, smem);                           \
    }

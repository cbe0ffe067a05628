// 01_simt: the floor of the tensor-core chapter. BF16 inputs, FP32 FFMA on the SIMT pipes, no
// tensor cores: C = A * B^T with A (M x K) and B (N x K) both row-major (K-major) BF16, FP32
// accumulation, C (M x N) row-major BF16.
//
// What it is: the sgemm chapter's 2D block tiling with vectorized loads, carried over to BF16.
// A BM x BN = 128 x 128 block tile, 256 threads, each computing an 8 x 8 patch (64 FP32
// accumulators). Each K-tile (BK = 16) of A and of B is read from global memory as one 16-byte
// load (8 BF16) per thread, converted to FP32 once and stored transposed (k-major rows of M or
// N) in shared memory, so that the inner loop reads its fragments as float4 (LDS.128) and does
// 64 FFMA per 4 LDS.128. The conversion happens once per element per block, not once per use.
// A thread's 8 rows are two groups of 4 spaced 64 apart (ditto its columns): a warp's fragment
// loads then read at most 16 consecutive float4 (256 B, 2 wavefronts, no conflict beyond that).
// Two shared stages with a register prefetch: tile t+1's 16-byte loads are issued before tile
// t's FFMAs and stored into the other stage after them: one __syncthreads per tile.
// Why it is the floor: H200's FP32 FFMA peak is ~67 TFLOP/s (the dense BF16 tensor peak is
// ~15x that), and the sgemm chapter's best SIMT kernel reached ~44 TFLOP/s: expect ~40 TFLOP/s
// here, ~6 % of cuBLAS BF16.
// What ncu should show: sm__inst_executed_pipe_fma dominant, no HMMA (sm__pipe_tensor_cycles_
// active ~0), ~1 shared load per 16 FFMA, a 2-way conflict on the transposed stores (two
// k-halves of a row land in the same bank; 16 stores a thread per tile, small against 1024
// FFMA), stall reasons dominated by math pipe throttle / not selected.
//
// Sizes: any M and N (zero-filled loads, guarded stores); K % 8 == 0 (16-byte A and B loads
// need 16-byte-aligned row starts; a k-chunk of 8 is then wholly inside or outside K).
// ptxas (nvcc 13.0, sm_90): 127 registers (cap 128 from __launch_bounds__(256, 2): 2 blocks =
// 16 warps/SM), no spills, 32 KiB static smem; SASS 1024 FFMA, 4 LDG.E.128, 64 LDS.128 per tile.
// Launch: grid (cdiv(N, 128), cdiv(M, 128)), block (256), no dynamic shared memory (32 KiB static).
// Indices are 32-bit: fine while M*K, N*K, M*N < 2^31 (all study sizes).

#include <cuda_bf16.h>

#define BM 128
#define BN 128
#define BK 16
#define NT 256

extern "C" __global__ void __launch_bounds__(NT, 2)
hgemm_simt(int M, int N, int K, const __nv_bfloat16* __restrict__ A,
           const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C)
{
    __shared__ __align__(16) float As[2][BK][BM];   // transposed: As[k][m]
    __shared__ __align__(16) float Bs[2][BK][BN];   // transposed: Bs[k][n]

    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;

    // loader: one 16-byte chunk of A and one of B per thread per tile
    const int lRow = tid / 2, lK = (tid % 2) * 8;
    const bool aRowOk = rowBase + lRow < M, bRowOk = colBase + lRow < N;
    const __nv_bfloat16* aSrc = A + (size_t)(aRowOk ? rowBase + lRow : 0) * K + lK;
    const __nv_bfloat16* bSrc = B + (size_t)(bRowOk ? colBase + lRow : 0) * K + lK;

    const int nTiles = (K + BK - 1) / BK;
    uint4 ra = make_uint4(0, 0, 0, 0), rb = make_uint4(0, 0, 0, 0);
    auto load = [&](int t) {
        const int k = t * BK + lK;
        ra = (aRowOk && k < K) ? *reinterpret_cast<const uint4*>(aSrc + t * BK) : make_uint4(0, 0, 0, 0);
        rb = (bRowOk && k < K) ? *reinterpret_cast<const uint4*>(bSrc + t * BK) : make_uint4(0, 0, 0, 0);
    };
    auto store = [&](int s) {
        const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&ra);
        const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&rb);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 fa = __bfloat1622float2(pa[j]);
            const float2 fb = __bfloat1622float2(pb[j]);
            As[s][lK + 2 * j][lRow] = fa.x;
            As[s][lK + 2 * j + 1][lRow] = fa.y;
            Bs[s][lK + 2 * j][lRow] = fb.x;
            Bs[s][lK + 2 * j + 1][lRow] = fb.y;
        }
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    if (nTiles > 0) {
        load(0);
        store(0);
    }
    __syncthreads();
    for (int t = 0; t < nTiles; ++t) {
        const int s = t & 1;
        if (t + 1 < nTiles) load(t + 1);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[8], b[8];
            *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(&As[s][k][ty * 4]);
            *reinterpret_cast<float4*>(&a[4]) = *reinterpret_cast<const float4*>(&As[s][k][64 + ty * 4]);
            *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(&Bs[s][k][tx * 4]);
            *reinterpret_cast<float4*>(&b[4]) = *reinterpret_cast<const float4*>(&Bs[s][k][64 + tx * 4]);
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (t + 1 < nTiles) store(s ^ 1);   // the other stage: last read before the previous barrier
        __syncthreads();
    }

    const bool nVec = (N % 4) == 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = rowBase + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        if (row >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = colBase + h * 64 + tx * 4;
            __nv_bfloat16* dst = C + (size_t)row * N + col;
            if (nVec && col + 3 < N) {
                __nv_bfloat162 lo = __floats2bfloat162_rn(acc[i][h * 4 + 0], acc[i][h * 4 + 1]);
                __nv_bfloat162 hi = __floats2bfloat162_rn(acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
                uint2 v;
                v.x = *reinterpret_cast<unsigned*>(&lo);
                v.y = *reinterpret_cast<unsigned*>(&hi);
                *reinterpret_cast<uint2*>(dst) = v;
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < N) dst[j] = __float2bfloat16_rn(acc[i][h * 4 + j]);
            }
        }
    }
}

// 02_wmma: the first tensor-core step. Same problem as 01 (C = A * B^T, BF16 in, FP32 accumulate,
// BF16 out), the multiply-add now on the tensor cores through nvcuda::wmma fragments
// (16 x 16 x 16, BF16 inputs, FP32 accumulator).
//
// Changed from 01: the inner product is no longer FFMA on FP32 copies. A BM x BN = 128 x 128 block
// tile is split over 8 warps as 2 x 4 warp tiles of 64 x 32; a warp holds 4 x 2 accumulator
// fragments (16 x 16 FP32 each) and, per 16-deep k-step, loads 4 A fragments (row_major from
// As[m][k]) and 2 B fragments (col_major from Bs[n][k]: B's rows are K-major, which is exactly
// B^T in column-major order, so no transpose is needed anywhere) and issues 8 wmma::mma_sync.
// Shared memory keeps BF16 as loaded: As[BM][BK] and Bs[BN][BK] row-major, BK = 32, filled by
// 16-byte loads (2 a thread a tile for A, 2 for B) staged through registers: tile t+1 is loaded
// into registers before tile t's MMAs and stored after them (two stages, one barrier a tile).
// The epilogue goes through a small per-warp FP32 scratch tile (store_matrix_sync), then each
// lane converts 8 values to BF16 and writes them with M/N guards.
// Why it should help: one HMMA.16816 does 4096 FLOP per warp instruction against 32 for an FFMA
// (two SASS HMMA per wmma 16x16x16): the SIMT issue limit that capped 01 is gone, and the
// limits become the shared-memory feeds and latency.
// What ncu should show: SASS HMMA.16816.F32.BF16 (16 a warp per k-tile of 32), tensor pipe
// (sm__pipe_tensor_cycles_active / sm__inst_executed_pipe_tensor) well above 0 but far from
// saturated; shared bank conflicts on the fragment loads: rows are 64 B apart, so the 8 rows
// an 8-lane phase reads fall on 2 distinct 16-byte bank groups (~4-way; step 04 removes them);
// stalls dominated by short_scoreboard / mio_throttle (shared loads) and barrier.
// Expected: several times 01 (WMMA beats the best SIMT step), ~25-35 % of cuBLAS.
//
// Sizes: any M and N (zero-filled loads, guarded stores); K % 8 == 0 (16-byte loads).
// ptxas (nvcc 13.0, sm_90): 128 registers (2 blocks/SM), no spills, 40 KiB static smem; SASS 32
// HMMA.16816.F32.BF16 and 64 scalar LDS per tile (WMMA's BF16 fragment loads are not LDSM).
// Launch: grid (cdiv(N, 128), cdiv(M, 128)), block (256), no dynamic shared memory
// (32 KiB static for the two stages + 8 KiB epilogue scratch).
// Indices are 32-bit: fine while M*K, N*K, M*N < 2^31 (all study sizes).

#include <cuda_bf16.h>
#include <mma.h>

using namespace nvcuda;

#define BM 128
#define BN 128
#define BK 32
#define WM 64
#define WN 32
#define NT 256
#define FM (WM / 16)   // accumulator fragments along M per warp
#define FN (WN / 16)   // along N

extern "C" __global__ void __launch_bounds__(NT, 2)
hgemm_wmma(int M, int N, int K, const __nv_bfloat16* __restrict__ A,
           const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C)
{
    __shared__ __align__(128) __nv_bfloat16 As[2][BM][BK];
    __shared__ __align__(128) __nv_bfloat16 Bs[2][BN][BK];
    __shared__ __align__(128) float scratch[NT / 32][16 * 16];

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;

    // loader: chunk c = tid + i*NT of the 128 x 32 tile (4 chunks of 8 BF16 per row)
    uint4 ra[2], rb[2];
    const int nTiles = (K + BK - 1) / BK;
    auto load = [&](int t) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int c = tid + i * NT, r = c / 4, kc = (c % 4) * 8, k = t * BK + kc;
            const int ga = rowBase + r, gb = colBase + r;
            ra[i] = (ga < M && k < K) ? *reinterpret_cast<const uint4*>(A + (size_t)ga * K + k)
                                      : make_uint4(0, 0, 0, 0);
            rb[i] = (gb < N && k < K) ? *reinterpret_cast<const uint4*>(B + (size_t)gb * K + k)
                                      : make_uint4(0, 0, 0, 0);
        }
    };
    auto store = [&](int s) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int c = tid + i * NT, r = c / 4, kc = (c % 4) * 8;
            *reinterpret_cast<uint4*>(&As[s][r][kc]) = ra[i];
            *reinterpret_cast<uint4*>(&Bs[s][r][kc]) = rb[i];
        }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    if (nTiles > 0) {
        load(0);
        store(0);
    }
    __syncthreads();
    for (int t = 0; t < nTiles; ++t) {
        const int s = t & 1;
        if (t + 1 < nTiles) load(t + 1);
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[FN];
#pragma unroll
            for (int i = 0; i < FM; ++i)
                wmma::load_matrix_sync(a[i], &As[s][warpRow * WM + i * 16][kk], BK);
#pragma unroll
            for (int j = 0; j < FN; ++j)
                wmma::load_matrix_sync(b[j], &Bs[s][warpCol * WN + j * 16][kk], BK);
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        if (t + 1 < nTiles) store(s ^ 1);
        __syncthreads();
    }

    // epilogue: fragment -> per-warp FP32 scratch -> BF16, guarded
    float* sc = scratch[warp];
    const bool nVec = (N % 8) == 0;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(sc, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int r = lane / 2, c0 = (lane % 2) * 8;
            const int row = rowBase + warpRow * WM + i * 16 + r;
            const int col = colBase + warpCol * WN + j * 16 + c0;
            if (row < M) {
                __nv_bfloat16* dst = C + (size_t)row * N + col;
                if (nVec && col + 7 < N) {
                    uint4 v;
                    unsigned* pv = reinterpret_cast<unsigned*>(&v);
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        __nv_bfloat162 h = __floats2bfloat162_rn(sc[r * 16 + c0 + 2 * q], sc[r * 16 + c0 + 2 * q + 1]);
                        pv[q] = *reinterpret_cast<unsigned*>(&h);
                    }
                    *reinterpret_cast<uint4*>(dst) = v;
                } else {
#pragma unroll
                    for (int q = 0; q < 8; ++q)
                        if (col + q < N) dst[q] = __float2bfloat16_rn(sc[r * 16 + c0 + q]);
                }
            }
            __syncwarp();
        }
}

// 05_cp_async: 04's swizzled mma.sync kernel with a STAGES-deep cp.async ring in dynamic shared
// memory, large warp tiles and a grouped block raster: the best this chapter gets out of
// Ampere-style instructions on Hopper (no wgmma, no TMA: those start at step 06).
//
// Changed from 04:
//  1. The loads. Global -> shared copies are cp.async.cg 16-byte (LDGSTS.E.BYPASS.128: straight
//     to shared memory, no register staging, L1 bypassed), STAGES-1 K-tiles in flight while
//     one is computed, one cp.async group per tile and one __syncthreads per tile. M/N edges
//     and the K tail use the src-size operand (0 bytes read -> 16 zero bytes written).
//  2. The tile shape. Default BM x BN x BK = 128 x 256 x 32, 8 warps as 2 x 4 warp tiles of
//     64 x 64: a warp does 32 MMAs (m16n8k16) per 16-deep k-step for 4 + 4 LDSM.x4, i.e. 8
//     HMMA per LDSM (04: 16 MMAs for 6 LDSM, 2.7). 128 FP32 accumulators a thread, one block
//     of 256 threads per SM (__launch_bounds__(NUM_THREADS, MIN_BLOCKS)). The config tunes
//     BM, BN, BK, WN, STAGES and MIN_BLOCKS (a 128 x 128 tile of 4 warps, 2 blocks/SM, is the
//     other natural point).
//  3. The swizzle generalized to BK = 32 (4 chunks a row: chunk ^ ((row / 2) % 4)) and BK = 64
//     (8 chunks: chunk ^ (row % 8)): every LDSM 8x8 matrix and every 8-lane phase of LDGSTS
//     touches 8 distinct 16-byte bank groups.
//  4. Grouped raster (GROUP_M): consecutive block ids walk GROUP_M block rows down a column
//     strip before moving right, so the A rows and B rows that concurrently running blocks
//     read overlap in L2 (at 4096^3 the whole problem fits the 50 MiB L2 anyway; at 8192 x
//     28672 x 4096 it does not).
// Pipeline (S = STAGES, tile t lives in stage t % S):
//   prologue: issue tiles 0..S-2, one commit group each (empty groups past the last tile)
//   iteration t: wait_group S-2 (my copies of tile t landed: S-1+t groups were committed, at
//                most the S-2 newest pending); __syncthreads (everyone's copies visible, and
//                everyone finished computing tile t-1, whose stage (t-1) % S = (t+S-1) % S is
//                refilled next); issue tile t+S-1; commit; compute tile t from stage t % S.
// Why it should help: 04 waited for each tile's global loads at the barrier (two stages,
// loads through registers); here ~(S-1) x 24 KiB of loads are in flight per SM while the
// tensor cores run, and the doubled HMMA:LDSM ratio lowers the shared-pipe pressure per MMA.
// What ncu should show: LDGSTS.E.BYPASS.128 instead of LDG + STS; shared bank conflicts ~0 (ld
// and st); HMMA.16816.F32.BF16 count = 2*M*N*K / 4096 per warp-instruction as before; tensor
// pipe utilization (sm__pipe_tensor_cycles_active) high, 60-70 % of peak; stalls: math pipe
// throttle / not selected, some barrier and long_scoreboard at the tile boundary; achieved
// occupancy 8 warps a SM (register-limited, 1 block). Expected >= 60 % of cuBLAS at 4096^3.
//
// Sizes: any M and N (zero-filled copies, guarded stores); K % 8 == 0 (16-byte copies need
// 16-byte-aligned row starts; an 8-wide k-chunk is then wholly in or out of K).
// ptxas (nvcc 13.0, sm_90), 128x256x32, 4 stages: 238 registers, no spills (1 block of 256
// threads/SM), 96 KiB dynamic smem; SASS 64 HMMA.16816.F32.BF16, 16 LDSM.16.M88.4 and 24
// LDGSTS.E.BYPASS.128 per tile (the `@!PT LDS RZ, [RZ]` lines next to the zero-fill copies are
// never executed). The 16 tuning candidates: 126-254 registers, none spills (BK 64 with 4 warps
// of 64x64 spilled and is left out).
// Launch: grid (cdiv(N, BN), cdiv(M, BM)), block (NUM_THREADS = (BM/WM)*(BN/WN)*32), dynamic
// shared memory STAGES * (BM + BN) * BK * 2 bytes (> 48 KiB: the launcher raises the limit).
// Indices are 32-bit except row * K and row * N products (size_t): fine for all study sizes.

#include <cuda_bf16.h>
#include <stdint.h>

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 64
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef NUM_THREADS
#define NUM_THREADS ((BM / WM) * (BN / WN) * 32)
#endif
#define MT (WM / 16)   // m16 tiles per warp
#define NT8 (WN / 8)   // n8 tiles per warp
#define CPR (BK / 8)   // 16-byte chunks per tile row
#define A_STAGE (BM * BK)   // BF16 elements per A stage
#define B_STAGE (BN * BK)

static_assert(NUM_THREADS == (BM / WM) * (BN / WN) * 32, "NUM_THREADS must be (BM/WM)*(BN/WN)*32");
static_assert(BK == 32 || BK == 64, "swizzle defined for 64-byte and 128-byte tile rows");
static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 16 == 0, "warp tiling");
static_assert((BM * CPR) % NUM_THREADS == 0 && (BN * CPR) % NUM_THREADS == 0,
              "the 16-byte copies must cover each tile exactly");
static_assert(STAGES >= 2, "at least 2 stages");
static_assert(STAGES * (A_STAGE + B_STAGE) * 2 <= 227 * 1024, "shared memory over 227 KiB");

// shared offset (BF16 elements) of chunk c of row r: chunk XOR (r / (8 / CPR)) % CPR
__device__ __forceinline__ int tile_off(int r, int c)
{
    return r * BK + ((c ^ ((r / (8 / CPR)) % CPR)) * 8);
}
#ifndef KB_EMU  // the CPU emulator of the tests provides these with the same meaning
__device__ __forceinline__ uint32_t smem_u32(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N_PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N_PENDING) : "memory"); }
__device__ __forceinline__ void ldsm_x4(uint32_t& d0, uint32_t& d1, uint32_t& d2, uint32_t& d3, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3) : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
hgemm_cp_async(int M, int N, int K, const __nv_bfloat16* __restrict__ A,
               const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C)
{
#ifdef KB_EMU
    __shared__ __align__(128) __nv_bfloat16 smem[STAGES * (A_STAGE + B_STAGE)];
#else
    extern __shared__ __align__(128) __nv_bfloat16 smem[];
#endif
    const uint32_t sA = smem_u32(smem);                    // STAGES x [BM][BK], swizzled
    const uint32_t sB = sA + STAGES * A_STAGE * 2;         // STAGES x [BN][BK], swizzled

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);

    // grouped raster: GROUP_M block rows per column sweep
    const int gridN = gridDim.x, gridM = gridDim.y;
    const int pid = blockIdx.y * gridN + blockIdx.x;
    const int perGroup = GROUP_M * gridN;
    const int firstM = (pid / perGroup) * GROUP_M;
    const int groupRows = min(gridM - firstM, GROUP_M);
    const int blockM = firstM + (pid % perGroup) % groupRows;
    const int blockN = (pid % perGroup) / groupRows;
    const int rowBase = blockM * BM, colBase = blockN * BN;

    const int nTiles = (K + BK - 1) / BK;
    auto issue = [&](int t) {
        const int s = t % STAGES;
#pragma unroll
        for (int i = 0; i < (BM * CPR) / NUM_THREADS; ++i) {
            const int c = tid + i * NUM_THREADS, r = c / CPR, ch = c % CPR, k = t * BK + ch * 8;
            const bool ok = rowBase + r < M && k < K;
            const __nv_bfloat16* src = ok ? A + (size_t)(rowBase + r) * K + k : A;
            cp_async_16(sA + 2 * (s * A_STAGE + tile_off(r, ch)), src, ok);
        }
#pragma unroll
        for (int i = 0; i < (BN * CPR) / NUM_THREADS; ++i) {
            const int c = tid + i * NUM_THREADS, r = c / CPR, ch = c % CPR, k = t * BK + ch * 8;
            const bool ok = colBase + r < N && k < K;
            const __nv_bfloat16* src = ok ? B + (size_t)(colBase + r) * K + k : B;
            cp_async_16(sB + 2 * (s * B_STAGE + tile_off(r, ch)), src, ok);
        }
    };

    float acc[MT][NT8][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    const int aRow = warpRow * WM + (lane % 16), aCh = lane / 16;
    const int bRow = warpCol * WN + (lane / 16) * 8 + (lane % 8), bCh = (lane / 8) % 2;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nTiles) issue(s);
        cp_async_commit();
    }

    for (int t = 0; t < nTiles; ++t) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (t + STAGES - 1 < nTiles) issue(t + STAGES - 1);
        cp_async_commit();

        const int s = t % STAGES;
        const uint32_t aBase = sA + 2 * s * A_STAGE, bBase = sB + 2 * s * B_STAGE;
        // fragments ping-pong: k-step kk+1's LDSMs are issued before k-step kk's MMAs
        uint32_t a[2][MT][4], b[2][NT8][2];
        auto frags = [&](int kk, int buf) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
                ldsm_x4(a[buf][i][0], a[buf][i][1], a[buf][i][2], a[buf][i][3],
                        aBase + 2 * tile_off(aRow + i * 16, kk * 2 + aCh));
#pragma unroll
            for (int j = 0; j < NT8 / 2; ++j)
                ldsm_x4(b[buf][2 * j][0], b[buf][2 * j][1], b[buf][2 * j + 1][0], b[buf][2 * j + 1][1],
                        bBase + 2 * tile_off(bRow + j * 16, kk * 2 + bCh));
        };
        frags(0, 0);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            if (kk + 1 < BK / 16) frags(kk + 1, (kk + 1) % 2);
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT8; ++j)
                    mma_bf16(acc[i][j], a[kk % 2][i], b[kk % 2][j][0], b[kk % 2][j][1]);
        }
    }
    cp_async_wait<0>();   // only empty groups can be pending here; leave nothing in flight

    const bool nVec = (N % 2) == 0;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = rowBase + warpRow * WM + i * 16 + lane / 4 + h * 8;
                const int col = colBase + warpCol * WN + j * 8 + (lane % 4) * 2;
                if (row >= M) continue;
                __nv_bfloat16* dst = C + (size_t)row * N + col;
                if (nVec && col + 1 < N) {
                    *reinterpret_cast<__nv_bfloat162*>(dst) =
                        __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                } else {
                    if (col < N) dst[0] = __float2bfloat16_rn(acc[i][j][2 * h]);
                    if (col + 1 < N) dst[1] = __float2bfloat16_rn(acc[i][j][2 * h + 1]);
                }
            }
}

// 03_mma_sync: the tensor cores through PTX, without the WMMA abstraction:
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 fed by ldmatrix.
//
// Changed from 02: same block tile (128 x 128, BK = 32, 8 warps of 64 x 32, two register-staged
// shared stages, one barrier a tile), same plain row-major BF16 tiles As[m][k], Bs[n][k]. The
// fragments now come from ldmatrix.sync.aligned.m8n8.x4.shared.b16: one instruction (LDSM.x4)
// loads a whole 16 x 16 A fragment or the 16(k) x 16(n) B operand of two m16n8k16 MMAs, already
// in the register layout mma wants (A rows are m, B rows are n with k contiguous: the `.col`
// operand as stored, no .trans). A warp per 16-deep k-step: 4 LDSM.x4 for A, 2 for B, 16 MMAs,
// against 02's 64 + 32 scalar LDS for the same work. The accumulators stay in registers in the
// documented m16n8 layout, so the epilogue writes BF16 pairs straight from registers (no
// scratch tile, no store_matrix_sync).
// Why it should help: ~4x fewer shared-load instructions per MMA (LDSM.x4 moves 512 B a warp;
// 02's LDS moved 128 B), so less MIO pressure; the fragment layout is known, so the epilogue
// and later the pipeline can be hand-scheduled.
// What ncu should show: SASS HMMA.16816.F32.BF16 (16 a warp per k-step, the same count as 02)
// and LDSM.16.M88.4; shared bank conflicts remain: rows are 64 B apart, so the 8 row addresses
// of each 8x8 matrix hit only 2 of the 8 16-byte bank groups, ~4-way
// (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum about 3x the LDSM wavefronts
// needed): step 04 fixes the layout. Stalls: short_scoreboard on LDSM, barrier.
// Expected: above 02 (fewer shared instructions), still well below 60 % of cuBLAS (conflicts,
// loads exposed behind one barrier per tile).
//
// Sizes: any M and N (zero-filled loads, guarded stores); K % 8 == 0 (16-byte loads).
// ptxas (nvcc 13.0, sm_90): 126 registers (2 blocks/SM), no spills, 32 KiB static smem; SASS 32
// HMMA.16816.F32.BF16 and 12 LDSM.16.M88.4 per tile. The CPU emulator of the tests counts 4
// row addresses per 16-byte bank group in the worst LDSM phase (4-way).
// Launch: grid (cdiv(N, 128), cdiv(M, 128)), block (256), no dynamic shared memory (32 KiB static).
// Indices are 32-bit: fine while M*K, N*K, M*N < 2^31 (all study sizes).

#include <cuda_bf16.h>
#include <stdint.h>

#define BM 128
#define BN 128
#define BK 32
#define WM 64
#define WN 32
#define NT 256
#define MT (WM / 16)   // m16 tiles per warp
#define NT8 (WN / 8)   // n8 tiles per warp
#define CPR (BK / 8)   // 16-byte chunks per tile row

// shared offset (in BF16 elements) of chunk `c` of row `r`: plain row-major here
__device__ __forceinline__ int tile_off(int r, int c) { return r * BK + c * 8; }

#ifndef KB_EMU  // the CPU emulator of the tests provides these with the same meaning
__device__ __forceinline__ uint32_t smem_u32(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(uint32_t& d0, uint32_t& d1, uint32_t& d2, uint32_t& d3, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3) : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

extern "C" __global__ void __launch_bounds__(NT, 2)
hgemm_mma_sync(int M, int N, int K, const __nv_bfloat16* __restrict__ A,
               const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C)
{
    __shared__ __align__(128) __nv_bfloat16 As[2][BM * BK];
    __shared__ __align__(128) __nv_bfloat16 Bs[2][BN * BK];

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int warpRow = warp / (BN / WN), warpCol = warp % (BN / WN);
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;

    uint4 ra[2], rb[2];
    const int nTiles = (K + BK - 1) / BK;
    auto load = [&](int t) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int c = tid + i * NT, r = c / CPR, k = t * BK + (c % CPR) * 8;
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
            const int c = tid + i * NT, r = c / CPR, ch = c % CPR;
            *reinterpret_cast<uint4*>(&As[s][tile_off(r, ch)]) = ra[i];
            *reinterpret_cast<uint4*>(&Bs[s][tile_off(r, ch)]) = rb[i];
        }
    };

    float acc[MT][NT8][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    // ldmatrix row addresses: A lanes 0-15 rows 0-15 at k-chunk 0, lanes 16-31 at chunk 1;
    // B lanes 8q..8q+7 give rows n = (q/2)*8 + lane%8 at k-chunk q%2
    const int aRow = warpRow * WM + (lane % 16), aCh = lane / 16;
    const int bRow = warpCol * WN + (lane / 16) * 8 + (lane % 8), bCh = (lane / 8) % 2;

    if (nTiles > 0) {
        load(0);
        store(0);
    }
    __syncthreads();
    for (int t = 0; t < nTiles; ++t) {
        const int s = t & 1;
        if (t + 1 < nTiles) load(t + 1);
        const uint32_t aBase = smem_u32(As[s]), bBase = smem_u32(Bs[s]);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            uint32_t a[MT][4], b[NT8][2];
#pragma unroll
            for (int i = 0; i < MT; ++i)
                ldsm_x4(a[i][0], a[i][1], a[i][2], a[i][3],
                        aBase + 2 * tile_off(aRow + i * 16, kk * 2 + aCh));
#pragma unroll
            for (int j = 0; j < NT8 / 2; ++j)
                ldsm_x4(b[2 * j][0], b[2 * j][1], b[2 * j + 1][0], b[2 * j + 1][1],
                        bBase + 2 * tile_off(bRow + j * 16, kk * 2 + bCh));
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT8; ++j) mma_bf16(acc[i][j], a[i], b[j][0], b[j][1]);
        }
        if (t + 1 < nTiles) store(s ^ 1);
        __syncthreads();
    }

    // epilogue: c0,c1 at (g, 2t..2t+1), c2,c3 at (g+8, ...), g = lane/4, t = lane%4
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

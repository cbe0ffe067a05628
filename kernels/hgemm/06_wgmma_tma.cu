// 06 WGMMA with TMA loads and mbarriers (sm_90a).
//
// What changed (after 05's cp.async + mma.sync pipeline): the copy engine (TMA) loads each
// BM x 64 tile of A and BN x 64 tile of B into shared memory, 128-byte swizzled, from a
// tensor map built on the host; one thread issues both copies of a stage and they complete
// on that stage's mbarrier (arrive.expect_tx with the stage's byte count, then try_wait on
// its phase). The math is warpgroup MMA: each of the two warpgroups issues
// wgmma.mma_async m64nBNk16 from shared-memory descriptors, four per 64-wide K tile, into
// 64 x BN fp32 accumulators held in registers. STAGES tiles are in flight: after a tile is
// consumed (wgmma.wait_group 0, then __syncthreads so neither warpgroup still reads it), thread
// 0 refills its stage with the tile STAGES ahead. Three stages of 128 x 128 tiles take 97 KiB,
// so two blocks share an SM and one computes while the other waits at its barrier.
//
// Why it should help: no thread spends instructions on addresses, copies or ldmatrix; a
// wgmma m64n128k16 does the work of 16 mma.sync m16n8k16 and reads its operands straight
// from shared memory, in the swizzled layout TMA wrote (no bank conflicts by construction).
//
// What ncu should show: HGMMA instructions and no HMMA / LDSM; UTMALDG for the loads;
// SYNCS (mbarrier) instructions; tensor pipe utilisation well above 05's, but with gaps:
// every tile ends with wait_group 0 and a block-wide barrier, so the tensor core idles while
// the last wgmma drains and the barrier gathers (stall reasons: barrier, wait).
//
// Shapes: TMA zero-fills out-of-bounds rows and columns, so any M, N and K work as long as
// a row of A and B is a multiple of 16 bytes (K % 8 == 0); stores are bounds-checked.
#include "sm90.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef STAGES
#define STAGES 3
#endif
#define BK 64
#define WARPGROUPS (BM / 64)
#define THREADS (WARPGROUPS * 128)
#define A_TILE_BYTES (BM * BK * 2)
#define B_TILE_BYTES (BN * BK * 2)

static_assert(BM % 64 == 0 && BM <= 256, "one warpgroup per 64 rows");
static_assert(BN % 64 == 0 && BN <= 256, "wgmma N");

extern "C" __global__ void __launch_bounds__(THREADS, 2)
    hgemm_wgmma_tma(int M, int N, int K, const __nv_bfloat16* __restrict__ A,
                    const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C,
                    const __grid_constant__ CUtensorMap tmA,
                    const __grid_constant__ CUtensorMap tmB) {
  extern __shared__ uint8_t smem_raw[];
  // 128-byte swizzled tiles must start on 1024 bytes (the launch asks for 1 KiB extra)
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~uintptr_t(1023));
  uint8_t* As = smem;
  uint8_t* Bs = smem + STAGES * A_TILE_BYTES;
  __shared__ __align__(8) uint64_t full[STAGES];

  const int tid = threadIdx.x, wg = tid / 128;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int ktiles = (K + BK - 1) / BK;

  if (tid == 0) {
    tma_prefetch_descriptor(&tmA);
    tma_prefetch_descriptor(&tmB);
    for (int s = 0; s < STAGES; ++s) mbar_init(&full[s], 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (tid == 0) {
    for (int s = 0; s < STAGES && s < ktiles; ++s) {
      mbar_expect_tx(&full[s], A_TILE_BYTES + B_TILE_BYTES);
      tma_load(As + s * A_TILE_BYTES, &tmA, &full[s], s * BK, m0);
      tma_load(Bs + s * B_TILE_BYTES, &tmB, &full[s], s * BK, n0);
    }
  }

  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

  for (int t = 0; t < ktiles; ++t) {
    const int s = t % STAGES;
    mbar_wait(&full[s], (t / STAGES) & 1);
    const uint8_t* a = As + s * A_TILE_BYTES + wg * 64 * BK * 2;  // this warpgroup's 64 rows
    const uint8_t* b = Bs + s * B_TILE_BYTES;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < BK / 16; ++k) {
      wgmma_bf16<BN>(acc, sw128_desc(a + 32 * k), sw128_desc(b + 32 * k));
    }
    wgmma_commit();
    wgmma_wait<0>();
    __syncthreads();  // both warpgroups are done with stage s
    if (tid == 0 && t + STAGES < ktiles) {
      mbar_expect_tx(&full[s], A_TILE_BYTES + B_TILE_BYTES);
      tma_load(As + s * A_TILE_BYTES, &tmA, &full[s], (t + STAGES) * BK, m0);
      tma_load(Bs + s * B_TILE_BYTES, &tmB, &full[s], (t + STAGES) * BK, n0);
    }
  }
  store_tile<BN>(acc, C, M, N, m0 + 64 * wg, n0);
}

// 07 Producer/consumer warp specialization with setmaxnreg (sm_90a).
//
// What changed (after 06): the block has three warpgroups with different jobs. Warpgroup 0
// is the producer: one of its threads keeps the STAGES-deep ring full, waiting on each
// stage's "empty" mbarrier before refilling it by TMA; the rest of it idles. Warpgroups 1 and
// 2 are consumers: each waits on a stage's "full" mbarrier, issues four wgmma m64nBNk16 on it,
// and keeps one K tile's wgmmas in flight (wgmma.wait_group 1): when tile t's group is
// issued, tile t-1's has completed, and each consumer warp releases that stage with an
// mbarrier arrive. No block-wide barrier is left in the main loop. setmaxnreg moves registers
// from the producer (40 a thread) to the consumers (232), so a consumer holds a 64 x 256
// fp32 tile (128 accumulators) without spilling.
//
// Why it should help: in 06 the tensor core idles at the end of every tile (wait_group 0 and
// __syncthreads); here the next tile's wgmmas are queued while the previous drain, and the
// loads are issued as soon as a stage frees, independent of the math warps. The larger
// tile (128 x 256) halves the shared-memory traffic per FLOP of B.
//
// What ncu should show: tensor pipe utilisation up from 06; stall reasons of the consumers
// dominated by waiting on wgmma (not barriers); registers per thread at the launch cap
// (168) in the report, SETMAXNREG in the SASS.
#include "sm90.cuh"

#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#define BM 128
#define BK 64
#define CONSUMERS 2
#define THREADS ((CONSUMERS + 1) * 128)
#define A_TILE_BYTES (BM * BK * 2)
#define B_TILE_BYTES (BN * BK * 2)

static_assert(BN % 64 == 0 && BN <= 256, "wgmma N");

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    hgemm_warp_specialized(int M, int N, int K, const __nv_bfloat16* __restrict__ A,
                           const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C,
                           const __grid_constant__ CUtensorMap tmA,
                           const __grid_constant__ CUtensorMap tmB) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~uintptr_t(1023));
  uint8_t* As = smem;
  uint8_t* Bs = smem + STAGES * A_TILE_BYTES;
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];

  const int tid = threadIdx.x, wg = tid / 128;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int ktiles = (K + BK - 1) / BK;

  if (tid == 0) {
    tma_prefetch_descriptor(&tmA);
    tma_prefetch_descriptor(&tmB);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], CONSUMERS * 4);  // one arrive per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // producer
    setmaxnreg_dec<40>();
    if (tid == 0) {
      for (int t = 0; t < ktiles; ++t) {
        const int s = t % STAGES;
        if (t >= STAGES) mbar_wait(&empty[s], (t / STAGES - 1) & 1);
        mbar_expect_tx(&full[s], A_TILE_BYTES + B_TILE_BYTES);
        tma_load(As + s * A_TILE_BYTES, &tmA, &full[s], t * BK, m0);
        tma_load(Bs + s * B_TILE_BYTES, &tmB, &full[s], t * BK, n0);
      }
    }
  } else {  // consumers
    setmaxnreg_inc<232>();
    const int c = wg - 1, lane = tid % 32;
    float acc[BN / 2];  // no zeroing: the first wgmma of the tile does not read it
    for (int t = 0; t < ktiles; ++t) {
      const int s = t % STAGES;
      mbar_wait(&full[s], (t / STAGES) & 1);
      const uint8_t* a = As + s * A_TILE_BYTES + c * 64 * BK * 2;
      const uint8_t* b = Bs + s * B_TILE_BYTES;
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BK / 16; ++k) {
        wgmma_bf16<BN>(acc, sw128_desc(a + 32 * k), sw128_desc(b + 32 * k), t > 0 || k > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // tile t-1's wgmmas are done: release its stage
      if (t > 0 && lane == 0) mbar_arrive(&empty[(t - 1) % STAGES]);
    }
    wgmma_wait<0>();
    store_tile<BN>(acc, C, M, N, m0 + 64 * c, n0);
  }
}

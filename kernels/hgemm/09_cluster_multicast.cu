// 09 2-CTA clusters with TMA multicast.
//
// What changed (after 08): blocks run in clusters of CLUSTER_M (2) along the grid's x, and
// the scheduler hands each cluster a pair of output tiles that share their columns: rank r
// computes tile row 2p + r of tile column q. Both need the same BN x 64 tile of B at every
// K step, so each rank loads only its half (BN/2 rows) and multicasts it into both blocks'
// shared memory (cp.async.bulk.tensor ... .multicast::cluster, mask 0b11), where it
// completes on each block's own "full" barrier. A stage may be refilled only when the
// consumers of both blocks are done with it, so every consumer warp arrives on the "empty"
// barrier of each block of the cluster (mapa + mbarrier.arrive.release.cluster). The
// barriers are initialised, and the blocks leave, behind a cluster-wide barrier, so no
// block receives a multicast or a remote arrive before its barriers exist or after it left.
//
// Why it should help: B is read from L2 once per cluster instead of once per block: L2 ->
// SM traffic per FLOP falls by a quarter (A: 128 rows, B: 256/2 rows per block and K step),
// which relieves the L2 bandwidth the persistent kernel leans on at 4096^3 and above.
//
// The barriers' scope: a consumer's arrive on a peer's "empty" barrier is a CTA-scoped
// release, and the producer's wait a CTA-scoped acquire (sm90.cuh says why). With
// .release.cluster / .acquire.cluster each arrive carried a MEMBAR.ALL.GPU and each wait a
// CCTL.IVALL, and this step ran at 0.335 ms at 4096^3 on the H200 against 08's 0.197; with
// them CTA-scoped, 0.198 ms at 4096^3 and 0.213-0.216 ms at 4096x4096x4104 (08: 0.307).
//
// What ncu should show: L2 -> shared bytes (lts__t_sectors_srcunit_tex... / TMA) down ~25 %
// from 08 at the same FLOPs; cluster launch of 66 clusters x 2; tensor pipe utilisation
// up where 08 was L2-bound.
#include "sm90.cuh"

#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 2
#endif
#ifndef ENTRY
#define ENTRY hgemm_cluster_multicast
#endif
// 10_best sets it: the epilogue goes through 2 KiB of shared memory per consumer warp
// (store_tile_staged), placed after the ring (its smem: key adds 16 KiB)
#ifndef STAGED_EPILOGUE
#define STAGED_EPILOGUE 0
#endif
#define BM 128
#define BK 64
#define CONSUMERS 2
#define THREADS ((CONSUMERS + 1) * 128)
#define A_TILE_BYTES (BM * BK * 2)
#define B_TILE_BYTES (BN * BK * 2)
#define B_PART_ROWS (BN / CLUSTER_M)  // rows of B each rank loads and multicasts

static_assert(BN % 64 == 0 && BN <= 256, "wgmma N");
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2, "clusters of 1 or 2 blocks");
static_assert(B_PART_ROWS % 8 == 0, "each part starts on a 1024-byte swizzle group");

// a consumer warp is done with a stage: tell the producer of every CTA of the cluster (each
// multicasts into it); a CTA alone arrives on its own barrier without mapa
__device__ __forceinline__ void release_stage(uint64_t* empty_s) {
  if (CLUSTER_M == 1) {
    mbar_arrive(empty_s);
  } else {
#pragma unroll
    for (int r = 0; r < CLUSTER_M; ++r) mbar_arrive_cluster(empty_s, r);
  }
}

// the pair-th output tile pair in grouped raster order: (pair row, tile column)
__device__ __forceinline__ void pair_coords(int pair, int pairs_m, int tiles_n, int& pm,
                                            int& tn) {
  const int per_group = GROUP_M * tiles_n;
  const int first_m = (pair / per_group) * GROUP_M;
  const int rows = min(pairs_m - first_m, GROUP_M);
  const int in_group = pair % per_group;
  pm = first_m + in_group % rows;
  tn = in_group / rows;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    ENTRY(int M, int N, int K, const __nv_bfloat16* __restrict__ A,
          const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C,
          const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~uintptr_t(1023));
  uint8_t* As = smem;
  uint8_t* Bs = smem + STAGES * A_TILE_BYTES;
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];

  const int tid = threadIdx.x, wg = tid / 128;
  const uint32_t rank = CLUSTER_M > 1 ? cluster_ctarank() : 0;
  const int cluster = blockIdx.x / CLUSTER_M, clusters = gridDim.x / CLUSTER_M;
  const int ktiles = (K + BK - 1) / BK;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int pairs_m = (tiles_m + CLUSTER_M - 1) / CLUSTER_M;
  const int pairs = pairs_m * tiles_n;

  if (tid == 0) {
    tma_prefetch_descriptor(&tmA);
    tma_prefetch_descriptor(&tmB);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], CLUSTER_M * CONSUMERS * 4);  // every consumer warp of the cluster
    }
    fence_barrier_init();
  }
  if (CLUSTER_M > 1) cluster_sync(); else __syncthreads();

  if (wg == 0) {  // producer
    setmaxnreg_dec<40>();
    if (tid == 0) {
      int it = 0;
      for (int pair = cluster; pair < pairs; pair += clusters) {
        int pm, tn;
        pair_coords(pair, pairs_m, tiles_n, pm, tn);
        const int row = (pm * CLUSTER_M + rank) * BM;  // may lie past M: TMA reads zeros
        for (int t = 0; t < ktiles; ++t, ++it) {
          const int s = it % STAGES;
          if (it >= STAGES) mbar_wait(&empty[s], (it / STAGES - 1) & 1);
          mbar_expect_tx(&full[s], A_TILE_BYTES + B_TILE_BYTES);
          tma_load(As + s * A_TILE_BYTES, &tmA, &full[s], t * BK, row);
          uint8_t* bpart = Bs + s * B_TILE_BYTES + rank * B_PART_ROWS * BK * 2;
          if (CLUSTER_M > 1) {
            tma_load_multicast(bpart, &tmB, &full[s], t * BK, tn * BN + rank * B_PART_ROWS,
                               (uint16_t)((1u << CLUSTER_M) - 1));
          } else {
            tma_load(bpart, &tmB, &full[s], t * BK, tn * BN);
          }
        }
      }
    }
  } else {  // consumers
    setmaxnreg_inc<232>();
    const int c = wg - 1, lane = tid % 32;
    int it = 0;
    for (int pair = cluster; pair < pairs; pair += clusters) {
      int pm, tn;
      pair_coords(pair, pairs_m, tiles_n, pm, tn);
      const int row = (pm * CLUSTER_M + rank) * BM;
      float acc[BN / 2];
      for (int t = 0; t < ktiles; ++t, ++it) {
        const int s = it % STAGES;
        mbar_wait(&full[s], (it / STAGES) & 1);
        const uint8_t* a = As + s * A_TILE_BYTES + c * 64 * BK * 2;
        const uint8_t* b = Bs + s * B_TILE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BK / 16; ++k) {
          wgmma_bf16<BN>(acc, sw128_desc(a + 32 * k), sw128_desc(b + 32 * k), t > 0 || k > 0);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (t > 0 && lane == 0) release_stage(&empty[(it - 1) % STAGES]);
      }
      wgmma_wait<0>();
      if (lane == 0) release_stage(&empty[(it - 1) % STAGES]);
      if (STAGED_EPILOGUE) {
        uint8_t* warp_buf = Bs + STAGES * B_TILE_BYTES + (tid - 128) / 32 * 2048;
        store_tile_staged<BN>(acc, C, M, N, row + 64 * c, tn * BN, warp_buf);
      } else {
        store_tile<BN>(acc, C, M, N, row + 64 * c, tn * BN);
      }
    }
  }
  // no block leaves while its peer may still arrive on its barriers
  if (CLUSTER_M > 1) cluster_sync();
}

// 08 A persistent kernel with a tile scheduler (grouped raster order).
//
// What changed (after 07): the grid is one block per SM (the grid's SM_COUNT, the device's
// SM count: 132 on the H200), and each block walks the output tiles tile = blockIdx.x,
// blockIdx.x + gridDim.x, ... The producer and the consumers walk the same sequence with one
// running K-tile counter, so the ring of stages and its mbarrier phases carry over from one
// tile to the next: the producer loads the next tile's first stages while the consumers
// still run the last tile's epilogue. Tiles are visited in grouped raster order: GROUP_M
// tile rows at a time, column by column within the group, so the blocks running at once
// share A rows and B columns in L2.
//
// Why it should help: 07 launches cdiv(M,128) * cdiv(N,256) blocks (512 at 4096^2, 3.9
// waves of 132): every block pays a prologue (barrier init, pipeline fill) and an epilogue
// during which its SM's tensor cores idle. Persistent blocks hide the fill behind the
// previous epilogue; the grouped order raises the L2 hit rate at 8192^3 and the LLM shapes.
//
// What ncu should show: 132 blocks; tensor pipe utilisation up from 07, mostly at large
// sizes; lower DRAM read bytes per FLOP (L2 hit rate up) than 07.
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
#define BM 128
#define BK 64
#define CONSUMERS 2
#define THREADS ((CONSUMERS + 1) * 128)
#define A_TILE_BYTES (BM * BK * 2)
#define B_TILE_BYTES (BN * BK * 2)

static_assert(BN % 64 == 0 && BN <= 256, "wgmma N");

// the tile-th output tile in grouped raster order: (tile row, tile column)
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& tm,
                                            int& tn) {
  const int per_group = GROUP_M * tiles_n;
  const int first_m = (tile / per_group) * GROUP_M;
  const int rows = min(tiles_m - first_m, GROUP_M);
  const int in_group = tile % per_group;
  tm = first_m + in_group % rows;
  tn = in_group / rows;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    hgemm_persistent(int M, int N, int K, const __nv_bfloat16* __restrict__ A,
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
  const int ktiles = (K + BK - 1) / BK;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n;

  if (tid == 0) {
    tma_prefetch_descriptor(&tmA);
    tma_prefetch_descriptor(&tmB);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], CONSUMERS * 4);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // producer
    setmaxnreg_dec<40>();
    if (tid == 0) {
      int it = 0;  // K tiles loaded so far, over all output tiles
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tm, tn;
        tile_coords(tile, tiles_m, tiles_n, tm, tn);
        for (int t = 0; t < ktiles; ++t, ++it) {
          const int s = it % STAGES;
          if (it >= STAGES) mbar_wait(&empty[s], (it / STAGES - 1) & 1);
          mbar_expect_tx(&full[s], A_TILE_BYTES + B_TILE_BYTES);
          tma_load(As + s * A_TILE_BYTES, &tmA, &full[s], t * BK, tm * BM);
          tma_load(Bs + s * B_TILE_BYTES, &tmB, &full[s], t * BK, tn * BN);
        }
      }
    }
  } else {  // consumers
    setmaxnreg_inc<232>();
    const int c = wg - 1, lane = tid % 32;
    int it = 0;  // K tiles consumed so far
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      int tm, tn;
      tile_coords(tile, tiles_m, tiles_n, tm, tn);
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
        if (t > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
      }
      wgmma_wait<0>();
      if (lane == 0) mbar_arrive(&empty[(it - 1) % STAGES]);  // the tile's last stage
      store_tile<BN>(acc, C, M, N, tm * BM + 64 * c, tn * BN);
    }
  }
}

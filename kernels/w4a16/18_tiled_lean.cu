// 18_tiled_lean: 13's blocks, one 16-row tile each, with 16's lean scale group, each warp
// summing x over its own groups.
//
// Changed from 13: the scale group's arithmetic, nothing of the grid or the walk. 15, 16 and 17
// each moved the work between warps (a run cut in advance, then a chunk a warp, the block
// scheduler handing them out), and each lost to 13 at 1 x 28672 x 4096, 17 the more the
// shorter its chunks: handing the work out in finer pieces than 13's tile of 4 warps buys
// nothing there, and the pieces cost (a release add and its MEMBAR a piece, the finisher's
// reads from L2). What 16 did gain, the group of about 100 instructions where 13's takes 146
// (no PRMT, 8 HMMAs for the zero point gone), is here put into 13's walk: the weights in the
// tiled_pairs layout, the zero point as -136 sum x, which each warp sums for the batch rows
// there are over its own groups only (16's block summed all of x for every block, 1792 times
// at the headline), after its first loads of W are on their way; the warps' sums of the tile
// through shared memory, as 13.
// Batch rows go 8 a pass (W read again from L2 for each; 13 takes 16 a pass).
// Hypothesis: 13's time less what the leaner group saves of each warp's turn between its loads
// of W (16 gained 4 % on 15 so): below 19.98 us at 1 x 28672 x 4096 (3x cuBLAS BF16 beside it
// in the run at 1917446), from 13's 20.70.
// What ncu should show: inst_executed down by about a quarter from 13's, DRAM throughput up
// from 13's 57.2 % of peak by as much as the time goes down.
// Measured (H200, the study's run at cbb1177, CUPTI kernel time; ncu under its own clocks): 2 %
// off 13, not the 4 % hoped for, and the 3x target missed: 20.35 us at 1 x 28672 x 4096 (13:
// 20.74 beside it), 265 % of cuBLAS BF16, which took 53.98 us in this run (59.94 in the run at
// 1917446: 3x now asks for 18.0 us); 74.05 us at 1 x 128256 x 4096 (13: 79.58), 320 % of
// cuBLAS there. WARPS 4 wins; 2 is within 1 %, 8 is 3 % slower. ncu at 1 x 28672: the SMs
// active 83.8 % of the elapsed cycles (32997 of 39361; 13: 82.4 %), DRAM 59.9 % of peak (13:
// 57.2 %), lts__t_bytes 93.7 MB (13: 93.1), the long-scoreboard stall 7.9 warps an issue
// against 13's 5.3: with fewer instructions the warps wait on W more, so W's latency, one
// group in flight a warp, is the limit now. Reading at 2979 GB/s, the step needs ~3.36 TB/s
// for 3x at this shape.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(N, 16)), block (32 * WARPS),
// WARPS * cdiv(K / 128, WARPS) * 32 bytes of dynamic shared memory.
#include "w4even.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (32 / WARPS)  // 32 warps an SM of 64 registers, as 13's winner
#endif
#ifndef AHEAD
#define AHEAD 0  // 19_l2_ahead: each warp asks L2 for its group AHEAD groups past the next
#endif

// L2 asked for the lane's 32 bytes of the warp's group k of n, where there is one (19)
__device__ __forceinline__ void tiled_ahead(const uint4* w, int k, int n)
{
#if AHEAD
  if (k < n) even_l2(w), even_l2(w + 32);
#else
  (void)w, (void)k, (void)n;
#endif
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_tiled_lean(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
              const unsigned* __restrict__ Wt, const __nv_bfloat16* __restrict__ St,
              __nv_bfloat16* __restrict__ y)
{
  __shared__ float part[WARPS][4][4][32];  // each warp's accumulators, lane-major
  DYNAMIC_SMEM_FLOATS(zs);                 // each warp's -136 sum x, its groups x 8 batch rows
  for (int m0 = 0; m0 < M; m0 += 8) {  // 8 batch rows a pass
    // (derived again each pass from threadIdx, so that none of it is held through the loop)
    const int tile = blockIdx.x, lane = even_tid() % 32, warp = even_tid() / 32, G = K / 128;
    const int n = warp < G ? (G - warp + WARPS - 1) / WARPS : 0;  // groups warp, warp + WARPS, ..
    float* const z = zs + warp * 8 * ((G + WARPS - 1) / WARPS);
    const size_t u = (size_t)tile * G + warp;
    const uint4* w = reinterpret_cast<const uint4*>(Wt) + u * 64 + lane;
    const unsigned* sp = reinterpret_cast<const unsigned*>(St) + u * 8 + lane / 4;
    float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    uint4 qa = make_uint4(0, 0, 0, 0), qb = qa;
    unsigned sc = 0;
    if (n > 0) qa = load_w(w), qb = load_w(w + 32), sc = __ldg(sp);  // on their way while
#pragma unroll
    for (int a = 1; a <= AHEAD; ++a) tiled_ahead(w + 64 * WARPS * a, a, n);
    even_warp_x_sums(z, M, K, m0, warp, n, WARPS, x);  // the warp sums x
    for (int k = 0; k < n; ++k) {
      const float sa = __uint_as_float(sc << 16), sb = __uint_as_float(sc & 0xFFFF0000u);
      even_group_lean(acc[0], qa, qb, sa, sb, warp + k * WARPS, M, K, m0, x, z, k);
      w += 64 * WARPS;
      sp += 8 * WARPS;
      if (k + 1 < n) qa = load_w(w), qb = load_w(w + 32), sc = __ldg(sp);
      tiled_ahead(w + 64 * WARPS * AHEAD, k + 1 + AHEAD, n);
    }
    sum_warps_store<WARPS, 1>(part, acc, M, N, m0, blockIdx.x * 16, y);
  }
}

// 02_i2f_rows_per_warp: 01 with ROWS rows of W a warp.
//
// Changed from 01: each lane step loads 16 bytes of each of ROWS rows (ROWS independent
// loads in flight a lane, the lever that took decode_gemm's BF16 GEMV from 02 to 03), and
// each x load feeds ROWS rows, so x's L1 traffic per weight falls by ROWS.
// Hypothesis to refute: if 01 is latency-bound (too few bytes in flight) this is faster;
// if the conversion binds, as 01's header argues, it is about the same speed, since every
// weight still takes one conversion.
// Expect: within 10 % of 01 at M = 1 (claims: same); faster at M >= 4, where x's loads,
// not the conversions, dominate 01's instructions.
// What ncu should show: the conversion pipe as busy as in 01; fewer L1 wavefronts a weight.
// The batch tile is 4 rows of x (ROWS * 4 accumulators; a tile of 8 spills at 128 regs): M > 4
// walks W once every 4 batch rows, the later walks from L2 where W fits it.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(N, WARPS * ROWS)), block
// (32 * WARPS).
#ifndef ROWS
#define ROWS 4
#endif
#define DEQUANT_MAGIC 0
#include "w4.cuh"

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_i2f_rows_per_warp(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                     const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
                     __nv_bfloat16* __restrict__ y)
{
  w4_warp(M, N, K, x, Wq, S, y);
}

// 01_i2f_warp_per_row: a warp per row of W, the nibbles converted by I2F.
//
// A warp owns one row n of W and computes y[m][n] for every batch row m in one walk along K:
// each step a lane loads 16 bytes of the row (32 weights, ld.global.cs) and its group's
// scale, turns each nibble into a float (shift, mask, subtract 8, and an integer-to-float
// conversion: I2FP.F32.S32 in sm_90's SASS), scales it, and FMAs it with x in FP32 for every
// batch row (x's 16 bytes a word through __ldg: x is small and read by every warp); a
// 5-shuffle reduction ends the row.
// Hypothesis: the conversion binds, not HBM. A weight is half a byte, so at the H200's
// ~4.2 TB/s streaming read the SMs must convert ~8.4 T nibbles a second; if the conversion
// issues at the programming guide's 16 a clock an SM for "other conversions", that is
// 132 x 16 x 1.98 GHz = 4.2 T a second, half the need. If sm_90's I2FP runs on a faster
// pipe, 01 is latency-bound instead (one 16-byte load of W in flight a lane) and 02 says so.
// Expect ~45 % of the read ceiling at M = 1.
// What ncu should show: dram__throughput well under peak; the pipe that runs I2FP near
// its limit, or long-scoreboard stalls (waiting on W) if it is latency.
//
// Sizes: any M, N; K a multiple of 128 (the problem's groups). Launch: grid
// (cdiv(N, WARPS * ROWS)), block (32 * WARPS), no shared memory.
#ifndef ROWS
#define ROWS 1
#endif
#define DEQUANT_MAGIC 0
#include "w4.cuh"

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_i2f_warp_per_row(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                    const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
                    __nv_bfloat16* __restrict__ y)
{
  w4_warp(M, N, K, x, Wq, S, y);
}

// 03_magic_dequant: 02 with the nibbles turned into floats without I2F.
//
// Changed from 02: a nibble n becomes a float by OR-ing it into the mantissa of 2^23
// (0x4B000000 | n is the float 8388608 + n) and subtracting 8388616.0f: one LOP3 (shift and
// mask fused where the compiler can) and one FADD a weight, both on the full-rate FP32 and
// integer pipes, exact for every nibble. No I2F is left in the inner loop.
// Hypothesis: with the conversion off the quarter-rate pipe, the walk is bound by HBM again:
// expect >= 85 % of the streaming-read ceiling at M = 1 on the large shapes, and >= 3x the
// BF16 cuBLAS GEMV on 28672 x 4096 and 128256 x 4096 (a quarter of the bytes, less the
// scales).
// What ncu should show: no I2F in the SASS; dram__throughput near peak;
// long-scoreboard stalls (waiting on W) the largest stall again.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(N, WARPS * ROWS)), block
// (32 * WARPS).
#ifndef ROWS
#define ROWS 4
#endif
#define DEQUANT_MAGIC 1
#include "w4.cuh"

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_magic_dequant(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                 const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
                 __nv_bfloat16* __restrict__ y)
{
  w4_warp(M, N, K, x, Wq, S, y);
}

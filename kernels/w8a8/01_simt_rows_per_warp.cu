// 01_simt_rows_per_warp: FP8 on the FP32 pipes: ROWS rows of W a warp, bytes decoded with
// integer operations, FP32 FMAs, the scales applied once at the end.
//
// A warp owns ROWS consecutive rows of W and computes y[m][n] for all of them and every
// batch row m in one walk along K: each step a lane loads 16 bytes (16 weights) of each row
// (ld.global.cs: W is read once) and, per batch row, 16 bytes of x (__ldg: x is small and
// read by every warp); every byte becomes a float by shifting its 7 magnitude bits into a
// float's exponent and mantissa (value x 2^-120, exact, subnormals too) and one FMUL by
// 2^120; the FP32 dot products end in a 5-shuffle reduction, times sx[m] * sw[n].
// Hypothesis: at M = 1 this reads W at near the streaming-read ceiling, as the BF16 GEMV's
// rows-per-warp step does (decode_gemm 03), on half the bytes: a decode costs 3 integer and
// 1 FP32 operation a byte, well inside the SM's issue rate at HBM speed (one byte a weight:
// ~4.2 G weights a ms against ~67 G FP32 lanes a ms). At M = 16 the decode of x's bytes,
// repeated in every warp, and the FMAs (16 a weight) make it issue-bound: the tensor-core
// step (02) is for there.
// What ncu should show: dram__throughput near peak at M = 1; at M = 16 the FMA and ALU pipes
// busy, dram__throughput falling.
//
// Sizes: any M, N; K a multiple of 16. Launch: grid (cdiv(N, WARPS * ROWS)), block
// (32 * WARPS), no shared memory. The batch tile is MAX_MT rows of x (ROWS * MAX_MT
// accumulators): M past it walks W once a tile.
#include "w8.cuh"

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w8_simt_rows_per_warp(int M, int N, int K, const unsigned char* __restrict__ xq,
                      const float* __restrict__ sx, const unsigned char* __restrict__ Wq,
                      const float* __restrict__ sw, __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  if (n0 >= N) return;  // the whole warp
  if (M <= 1) w8_rows<1>(M, N, K, n0, 0, lane, xq, sx, Wq, sw, y);
  else if (M <= 2) w8_rows<2>(M, N, K, n0, 0, lane, xq, sx, Wq, sw, y);
  else
    for (int m0 = 0; m0 < M; m0 += MAX_MT) w8_rows<MAX_MT>(M, N, K, n0, m0, lane, xq, sx, Wq, sw, y);
}

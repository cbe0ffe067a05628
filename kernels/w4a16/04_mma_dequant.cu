// 04_mma_dequant: the products on the BF16 tensor cores (mma.sync m16n8k16, FP32 accumulate),
// each nibble pair turned into two BF16 weights by one LOP3 and one bf16x2 subtraction.
//
// Changed from 03: 03 spends ~6 instructions a weight (shift, mask-and-OR, FADD, the scale's
// FMUL, the FMA, x's conversion): at 0.5 byte a weight the read ceiling asks for ~36 weights
// a cycle an SM, which at 128 lane-instructions a cycle leaves ~3.5 a weight. Here:
// - a warp owns 16 rows of W (one m16 tile: W is the mma's A operand, x its B operand with 8
//   batch rows an n8 tile, zeros past M) and the WARPS warps of a block take interleaved
//   scale groups of K (128 weights), adding their tiles through shared memory at the end;
// - a lane loads 16 bytes (32 weights) of rows g and g + 8 of the tile per group (g = lane / 4;
//   the 4 lanes of a row read its whole group); nibbles s and s + 4 of a word become a bf16
//   pair with ((q >> 4s) & 0x000F000F) | 0x43004300 (128 + n, exact) and one sub.bf16x2 of
//   136: q - 8 exactly. That register is the A fragment's (k, k + 1) for this lane: a
//   permutation of K, the same for x (whose pairs a PRMT builds from its 16-byte loads), so the
//   dot products are unchanged. ~1.5 instructions a weight, and one mma per 8 weights a lane
//   for every 8 batch rows;
// - the mmas of a group sum exact integers times x in FP32; the group's scale multiplies the
//   16 x 8 tile once (4 FMAs a lane), not every weight;
// - UNR groups' loads are issued before any is used (UNR * 32 bytes of W in flight a lane).
// Hypothesis: bound by HBM at M = 1 and still at M = 32 (the dequantization is shared by every
// batch row): >= 85 % of the streaming-read ceiling on the large shapes, >= 3x the BF16 cuBLAS
// GEMV on 28672 x 4096 and 128256 x 4096.
// What ncu should show: HMMA.16816.F32.BF16 in the SASS and no I2F; dram__throughput near
// peak; issue slots under half used; long-scoreboard stalls the largest.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(N, 16)), block (32 * WARPS),
// static shared memory WARPS * 4 * 4 * 32 floats.
#include "w4mma.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNR
#define UNR 4  // scale groups a warp loads before using any
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (16 / WARPS)  // 16 warps an SM: at most 128 registers a thread
#endif

typedef float Partials[WARPS][4][4][32];  // each warp's accumulators, lane-major

// y[m0 .. m0 + 8 * MT) x [n0 .. n0 + 16) of this block: MT n8 tiles of batch rows

template <int MT>
__device__ __forceinline__ void w4_mma_tile(Partials& part, int M, int N, int K, int m0, int n0,
                                            const __nv_bfloat16* __restrict__ x,
                                            const unsigned* __restrict__ Wq,
                                            const __nv_bfloat16* __restrict__ S,
                                            __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int ra = n0 + g, rb = n0 + g + 8, groups = K / 128;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // this lane's 16 bytes of group gi of rows ra and rb: uint4 number 4 gi + t of the row
  const uint4* wa = reinterpret_cast<const uint4*>(Wq + (size_t)ra * (K / 8)) + t;
  const uint4* wb = reinterpret_cast<const uint4*>(Wq + (size_t)rb * (K / 8)) + t;
  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  for (int g0 = warp; g0 < groups; g0 += WARPS * UNR) {
    uint4 qa[UNR], qb[UNR];
    float sa[UNR], sb[UNR];
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const int gi = g0 + u * WARPS;
      const bool in = gi < groups;
      qa[u] = in && ra < N ? __ldcs(wa + 4 * gi) : zero;  // W is read once: streaming
      qb[u] = in && rb < N ? __ldcs(wb + 4 * gi) : zero;
      sa[u] = in && ra < N ? __bfloat162float(S[(size_t)ra * groups + gi]) : 0.0f;
      sb[u] = in && rb < N ? __bfloat162float(S[(size_t)rb * groups + gi]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const int gi = g0 + u * WARPS;
      if (gi >= groups) break;  // the same for the whole warp
      w4_group_mma<MT>(acc, qa[u], qb[u], sa[u], sb[u], gi, M, K, m0, x);
    }
  }
  sum_warps_store<WARPS, MT>(part, acc, M, N, m0, n0, y);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_mma_dequant(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
               const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
               __nv_bfloat16* __restrict__ y)
{
  __shared__ Partials part;
  const int n0 = blockIdx.x * 16;
  if (n0 >= N) return;  // the whole block
  if (M <= 8) w4_mma_tile<1>(part, M, N, K, 0, n0, x, Wq, S, y);
  else if (M <= 16) w4_mma_tile<2>(part, M, N, K, 0, n0, x, Wq, S, y);
  else
    for (int m0 = 0; m0 < M; m0 += 32) w4_mma_tile<4>(part, M, N, K, m0, n0, x, Wq, S, y);
}

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
#include "../common/mma.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNR
#define UNR 4  // scale groups a warp loads before using any
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (16 / WARPS)  // 16 warps an SM: at most 128 registers a thread
#endif

// nibbles S_ and S_ + 4 of word q, minus 8, as two bf16 (nibble S_ in the low half): exact
template <int S_>
__device__ __forceinline__ unsigned nib_pair(unsigned q)
{
  const unsigned v = ((q >> (4 * S_)) & 0x000F000Fu) | 0x43004300u;  // 128 + n, twice
  return bf16x2_sub(v, 0x43084308u);  // - 136, twice
}

// x's elements S_ and S_ + 4 of 8 consecutive bf16 (a 16-byte load), in nib_pair's order
template <int S_>
__device__ __forceinline__ unsigned x_pair(uint4 v)
{
  const unsigned lo = S_ < 2 ? v.x : v.y, hi = S_ < 2 ? v.z : v.w;
  return __byte_perm(lo, hi, S_ % 2 == 0 ? 0x5410 : 0x7632);
}

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
      unsigned a[4][2][4];  // [word][pair of the word's two k-steps][fragment register]
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const unsigned ua = w == 0 ? qa[u].x : w == 1 ? qa[u].y : w == 2 ? qa[u].z : qa[u].w;
        const unsigned ub = w == 0 ? qb[u].x : w == 1 ? qb[u].y : w == 2 ? qb[u].z : qb[u].w;
        a[w][0][0] = nib_pair<0>(ua), a[w][0][1] = nib_pair<0>(ub);
        a[w][0][2] = nib_pair<1>(ua), a[w][0][3] = nib_pair<1>(ub);
        a[w][1][0] = nib_pair<2>(ua), a[w][1][1] = nib_pair<2>(ub);
        a[w][1][2] = nib_pair<3>(ua), a[w][1][3] = nib_pair<3>(ub);
      }
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        const int m = m0 + 8 * j + g;  // this lane's batch row of the B fragment
        const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)m * K + gi * 128 + 32 * t);
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const uint4 xv = m < M ? __ldg(xr + w) : zero;
          mma_bf16(c, a[w][0][0], a[w][0][1], a[w][0][2], a[w][0][3], x_pair<0>(xv), x_pair<1>(xv));
          mma_bf16(c, a[w][1][0], a[w][1][1], a[w][1][2], a[w][1][3], x_pair<2>(xv), x_pair<3>(xv));
        }
        acc[j][0] = fmaf(sa[u], c[0], acc[j][0]);  // rows ra, rb: their group's scale
        acc[j][1] = fmaf(sa[u], c[1], acc[j][1]);
        acc[j][2] = fmaf(sb[u], c[2], acc[j][2]);
        acc[j][3] = fmaf(sb[u], c[3], acc[j][3]);
      }
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

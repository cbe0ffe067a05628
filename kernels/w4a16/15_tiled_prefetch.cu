// 15_tiled_prefetch: 13's kernel with its loads issued a round ahead of their use, across the
// ends of tiles (a block takes TILES adjacent tiles), and 14's paired nibbles (no PRMT).
//
// Changed from 13: 13's warp loads UNR groups of W, waits for them, computes them, and only
// then loads its next UNR groups, so that while a warp computes (~110 instructions a group,
// in chains of dependent HMMAs) none of its bytes are in flight; and a block is one tile, so
// every block's first loads wait a whole DRAM latency with nothing else to do. It reads
// 68.9 % of the streaming read at 1 x 28672 x 4096 (22.1 us), where the BF16 GEMV of
// decode_gemm 08/09, which computes 4x less a byte, reads 91-93 %. Here:
// - each warp holds two rounds of UNR groups in registers: the next round's W and scales are
//   loaded before the current round is computed (a software pipeline), so each warp's loads
//   are in flight while it computes;
// - a block takes TILES adjacent tiles (the grid cdiv(cdiv(N, 16), TILES)), and the pipeline
//   runs on from one tile's last round into the next tile's first, so the next tile's bytes
//   are in flight during the warps' sum of a tile (two barriers);
// - W in the tiled_pairs layout (the problem's alternative, as 14): nibbles s and s + 4 are
//   weights 2s and 2s + 1, so x's 32-bit words feed the mma as they lie, where 13 permuted
//   them by 16 PRMTs a group;
// - x's batch rows past M are read as row M - 1 (their columns of C are never stored): no
//   predicated loads, no zeroed registers.
// The zero point stays 13's own chain of 8 HMMAs a group (a constant A of -136).
// Hypothesis: the loads in flight while the products are computed: >= 80 % of the read
// ceiling at 1 x 28672 x 4096 (13: 68.9 %), ~18 us, 3x cuBLAS BF16.
// What ncu should show: dram__throughput above 13's; long-scoreboard stalls a smaller share
// than 13's; no PRMT in the loop.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(cdiv(N, 16), TILES)), block
// (32 * WARPS), WARPS x 2 KB of static shared memory (the warps' sums).
#include "w4offset.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNR
#define UNR 2  // scale groups a warp a round; two rounds in registers
#endif
#ifndef TILES
#define TILES 4  // adjacent 16-row tiles a block
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 5  // blocks an SM: 20 warps of 4, at most 96 registers a thread
#endif

typedef float PrefetchPartials[WARPS][4][4][32];  // each warp's accumulators, lane-major

// 16 bytes of Wt, through L2 only: L1 keeps x
__device__ __forceinline__ uint4 load_wt(const uint4* p)
{
#ifdef KERNELBOOK_EMU
  return *p;
#else
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
#endif
}

// a round: UNR groups of one tile, W (rows g, g + 8) and the scales, for this lane
struct Round {
  uint4 qa[UNR], qb[UNR];
  unsigned sc[UNR];
};

// round r of tile `tile`: groups warp + WARPS (UNR r + u); past the tile's groups, zeros
__device__ __forceinline__ void load_round(Round& R, int tile, int r, int groups,
                                           const uint4* __restrict__ Wt,
                                           const unsigned* __restrict__ St)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int u = 0; u < UNR; ++u) {
    const int gi = warp + WARPS * (UNR * r + u);
    const bool in = gi < groups;  // rows past N are zeros in the layout: no row guard
    const size_t at = (size_t)tile * groups + gi;
    R.qa[u] = in ? load_wt(Wt + at * 64 + lane) : zero;
    R.qb[u] = in ? load_wt(Wt + at * 64 + 32 + lane) : zero;
    R.sc[u] = in ? St[at * 8 + g] : 0u;
  }
}

// acc[j] += round r's products with batch rows m0 + 8 j + g of x (tiled_pairs: x's words as
// they lie), each group's sum times its rows' scales
template <int MT>
__device__ __forceinline__ void compute_round(float (&acc)[MT][4], const Round& R, int r,
                                              int groups, int M, int K, int m0,
                                              const __nv_bfloat16* __restrict__ x)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int u = 0; u < UNR; ++u) {
    const int gi = warp + WARPS * (UNR * r + u);
    if (gi >= groups) break;  // the same for the whole warp
    float c[MT][4], d[MT][4];
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) c[j][i] = d[j][i] = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const unsigned ua = w == 0 ? R.qa[u].x : w == 1 ? R.qa[u].y : w == 2 ? R.qa[u].z : R.qa[u].w;
      const unsigned ub = w == 0 ? R.qb[u].x : w == 1 ? R.qb[u].y : w == 2 ? R.qb[u].z : R.qb[u].w;
      const unsigned a0 = nib_biased<0>(ua), a1 = nib_biased<0>(ub), a2 = nib_biased<1>(ua),
                     a3 = nib_biased<1>(ub), a4 = nib_biased<2>(ua), a5 = nib_biased<2>(ub),
                     a6 = nib_biased<3>(ua), a7 = nib_biased<3>(ub);
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        // this lane's batch row of the B fragment; past M, row M - 1 (never stored)
        const int m = min(m0 + 8 * j + g, M - 1);
        const uint4 xv =
            __ldg(reinterpret_cast<const uint4*>(x + (size_t)m * K + gi * 128 + 32 * t) + w);
        mma_bf16(c[j], a0, a1, a2, a3, xv.x, xv.y);
        mma_bf16(d[j], MINUS_136, MINUS_136, MINUS_136, MINUS_136, xv.x, xv.y);
        mma_bf16(c[j], a4, a5, a6, a7, xv.z, xv.w);
        mma_bf16(d[j], MINUS_136, MINUS_136, MINUS_136, MINUS_136, xv.z, xv.w);
      }
    }
    const float sa = __uint_as_float(R.sc[u] << 16), sb = __uint_as_float(R.sc[u] & 0xFFFF0000u);
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      acc[j][0] = fmaf(sa, c[j][0] + d[j][0], acc[j][0]);  // rows g, g + 8: their scales
      acc[j][1] = fmaf(sa, c[j][1] + d[j][1], acc[j][1]);
      acc[j][2] = fmaf(sb, c[j][2] + d[j][2], acc[j][2]);
      acc[j][3] = fmaf(sb, c[j][3] + d[j][3], acc[j][3]);
    }
  }
}

// one step of the pipeline: the round after (tile, r) loaded into `nxt`, then round r of
// `tile` (in `cur`) computed, and at a tile's last round the tile summed and stored; tile
// and r move on to the loaded round. False when the block's tiles are done.
template <int MT>
__device__ __forceinline__ bool step(PrefetchPartials& part, float (&acc)[MT][4], Round& cur,
                                     Round& nxt, int& tile, int& r, int rounds, int t1, int M,
                                     int N, int K, int m0, const __nv_bfloat16* __restrict__ x,
                                     const uint4* __restrict__ Wt,
                                     const unsigned* __restrict__ St,
                                     __nv_bfloat16* __restrict__ y)
{
  const int groups = K / 128;
  const bool last = r + 1 == rounds;  // the tile's last round
  const int ntile = last ? tile + 1 : tile, nr = last ? 0 : r + 1;
  if (ntile < t1) load_round(nxt, ntile, nr, groups, Wt, St);  // in flight from here on
  compute_round<MT>(acc, cur, r, groups, M, K, m0, x);
  if (last) {  // the tile's sums, while the next tile's first round arrives
    sum_warps_store<WARPS, MT>(part, acc, M, N, m0, tile * 16, y);
#pragma unroll
    for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  }
  tile = ntile, r = nr;
  return tile < t1;
}

// y[m0 .. m0 + 8 MT) x the rows of tiles [t0, t1): the warp's rounds of each tile in order,
// each round's loads issued before the round before it is computed; two rounds in
// registers, A and B taking turns (no copies between them)
template <int MT>
__device__ __forceinline__ void tiles_pass(PrefetchPartials& part, int M, int N, int K, int m0,
                                           int t0, int t1, const __nv_bfloat16* __restrict__ x,
                                           const uint4* __restrict__ Wt,
                                           const unsigned* __restrict__ St,
                                           __nv_bfloat16* __restrict__ y)
{
  const int groups = K / 128;
  const int rounds = (groups + WARPS * UNR - 1) / (WARPS * UNR);  // a tile's, every warp's
  Round A, B;
  load_round(A, t0, 0, groups, Wt, St);
  int tile = t0, r = 0;
  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  while (step<MT>(part, acc, A, B, tile, r, rounds, t1, M, N, K, m0, x, Wt, St, y) &&
         step<MT>(part, acc, B, A, tile, r, rounds, t1, M, N, K, m0, x, Wt, St, y)) {
  }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_tiled_prefetch(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                  const unsigned* __restrict__ Wt, const __nv_bfloat16* __restrict__ St,
                  __nv_bfloat16* __restrict__ y)
{
  __shared__ PrefetchPartials part;
  const int T = (N + 15) / 16, t0 = blockIdx.x * TILES, t1 = min(t0 + TILES, T);
  if (t0 >= T) return;  // the whole block
  const uint4* wt = reinterpret_cast<const uint4*>(Wt);
  const unsigned* st = reinterpret_cast<const unsigned*>(St);
  if (M <= 8) tiles_pass<1>(part, M, N, K, 0, t0, t1, x, wt, st, y);
  else
    for (int m0 = 0; m0 < M; m0 += 16) tiles_pass<2>(part, M, N, K, m0, t0, t1, x, wt, st, y);
}

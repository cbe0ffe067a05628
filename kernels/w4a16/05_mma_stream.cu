// 05_mma_stream: 04's tensor-core dequantization, with W streamed through a register pipeline
// by warps that own their rows' whole K where the shape has rows enough.
//
// Changed from 04: at 1 x 28672 x 4096 04 reads 2189 GB/s, under half the read ceiling. Its
// block of 4 warps splits one 16-row tile's K four ways, so a warp has 8 groups (two rounds of
// 4 loads then 4 uses) and the block ends in a shared-memory sum: each warp's loads come in
// two bursts with nothing in flight between them, and 1792 blocks of 32 KB of W make 3.4 waves
// of short blocks on 132 SMs. Here:
// - the K split is the shape's: KS = blockDim.x / 32 warps a tile, as few as still give the
//   grid about TARGET_WARPS warps (the launch's block expression): 1 at N = 28672 and 128256
//   (a warp streams its 16 rows' whole K, and the tile needs no sum through shared memory),
//   2 at 14336, 7 at 4096;
// - a warp keeps UNR scale groups in flight all the way through: after using group i it
//   loads group i + UNR into the registers group i held, so UNR - 1 groups are in the air
//   while it computes and UNR while it waits;
// - one warp a block where KS = 1: blocks are spread over the SMs a warp at a time (1792
//   warps at 28672: 13 or 14 an SM), no block's tail waits for another warp.
// Hypothesis: the loads never stop, so HBM stays busy: >= 80 % of the read ceiling at
// 1 x 28672 x 4096 and 1 x 128256 x 4096, >= 3x cuBLAS BF16 there; no worse than 04 on the
// N = 4096 shapes, which split K as 04 does.
// What ncu should show: dram__throughput above 04's; long-scoreboard stalls still the
// largest; no shared memory traffic where KS = 1.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(N, 16)), block (32 * KS), dynamic
// shared memory KS * 4 * 4 * 32 floats where KS > 1, else none.
#include "w4mma.cuh"

#ifndef UNR
#define UNR 4  // scale groups in flight a warp
#endif
#ifndef MAX_KS
#define MAX_KS 8  // warps a tile at most (the block)
#endif
// 16 warps an SM whatever the block: at most 128 registers a thread
#define MIN_BLOCKS (16 / MAX_KS)

// y[m0 .. m0 + 8 * MT) x [n0 .. n0 + 16) of this block: MT n8 tiles of batch rows, U groups
// of W in flight a warp
template <int MT, int U>
__device__ __forceinline__ void w4_stream_tile(float* part, int M, int N, int K, int m0, int n0,
                                               const __nv_bfloat16* __restrict__ x,
                                               const unsigned* __restrict__ Wq,
                                               const __nv_bfloat16* __restrict__ S,
                                               __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, ks = blockDim.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int ra = n0 + g, rb = n0 + g + 8, groups = K / 128;
  // this warp's groups: warp + i * ks while < groups (no division by the runtime ks)
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const uint4* wa = reinterpret_cast<const uint4*>(Wq + (size_t)ra * (K / 8)) + t;
  const uint4* wb = reinterpret_cast<const uint4*>(Wq + (size_t)rb * (K / 8)) + t;
  const bool ina = ra < N, inb = rb < N;
  uint4 qa[U], qb[U];
  float sa[U], sb[U];
  // group i of this warp into slot u (zeros past the warp's groups or the rows)
  auto load = [&](int u, int i) {
    const int gi = warp + i * ks;
    const bool in = gi < groups;
    qa[u] = in && ina ? __ldcs(wa + 4 * gi) : zero;  // W is read once: streaming
    qb[u] = in && inb ? __ldcs(wb + 4 * gi) : zero;
    sa[u] = in && ina ? __bfloat162float(S[(size_t)ra * groups + gi]) : 0.0f;
    sb[u] = in && inb ? __bfloat162float(S[(size_t)rb * groups + gi]) : 0.0f;
  };
  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
  for (int u = 0; u < U; ++u) load(u, u);
  for (int i0 = 0; warp + i0 * ks < groups; i0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u, gi = warp + i * ks;
      if (gi < groups)  // the same for the whole warp
        w4_group_mma<MT>(acc, qa[u], qb[u], sa[u], sb[u], gi, M, K, m0, x);
      load(u, i + U);  // the slot's next group, in flight while the others are used
    }
  }
  if (ks == 1) {  // the warp's tile is whole: the C fragment straight to y
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int n = n0 + g + (r < 2 ? 0 : 8), m = m0 + 8 * j + 2 * t + r % 2;
        if (n < N && m < M) y[(size_t)m * N + n] = __float2bfloat16_rn(acc[j][r]);
      }
    return;
  }
  // the block's ks tiles of partial sums through shared memory ([ks][MT][4][32], lane-major)
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) part[((warp * MT + j) * 4 + r) * 32 + lane] = acc[j][r];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float s = 0.0f;
        for (int w = 0; w < ks; ++w) s += part[((w * MT + j) * 4 + r) * 32 + lane];
        const int n = n0 + g + (r < 2 ? 0 : 8), m = m0 + 8 * j + 2 * t + r % 2;
        if (n < N && m < M) y[(size_t)m * N + n] = __float2bfloat16_rn(s);
      }
  }
  __syncthreads();  // part is free again (the next m0's tile)
}

extern "C" __global__ void __launch_bounds__(32 * MAX_KS, MIN_BLOCKS)
w4_mma_stream(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
              const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
              __nv_bfloat16* __restrict__ y)
{
  DYNAMIC_SMEM_FLOATS(part);  // KS * MT * 4 * 32 floats where KS > 1
  const int n0 = blockIdx.x * 16;
  if (n0 >= N) return;  // the whole block
  // past 16 batch rows the accumulators take the registers of half the loads in flight
  if (M <= 8) w4_stream_tile<1, UNR>(part, M, N, K, 0, n0, x, Wq, S, y);
  else if (M <= 16) w4_stream_tile<2, UNR>(part, M, N, K, 0, n0, x, Wq, S, y);
  else
    for (int m0 = 0; m0 < M; m0 += 32)
      w4_stream_tile<4, (UNR + 1) / 2>(part, M, N, K, m0, n0, x, Wq, S, y);
}

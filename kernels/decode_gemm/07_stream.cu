// 07_stream: 02's warp per row of W, on a persistent grid whose warps stream their rows
// through a DEPTH-deep register pipeline that runs on across the ends of rows.
//
// Changed from 02: 02 is at 87 % of the read ceiling at 1 x 14336 x 4096 and 92 % at
// 1 x 128256 x 4096, cuBLAS at 88 % and 94.5 %. Its warp loads 4 steps of its row (2 KB) and
// waits; at the row's end it reduces, stores and exits, and a new block must start before
// that SM's share of the bytes is in flight again: 14336 rows are 1.7 waves of 4-warp blocks.
// Here:
// - the grid is SM_COUNT * BLOCKS_SM blocks of WARPS warps (16 warps an SM), each warp takes
//   rows gw, gw + TW, ... (TW warps in all: 6 or 7 rows each at N = 14336, 60 or 61 at
//   128256), so no block starts or ends in the middle of the stream;
// - a lane keeps DEPTH 16-byte loads of W in flight (8 KB a warp, 128 KB an SM): the load
//   cursor runs DEPTH steps ahead of the use cursor, from the end of one row into the start
//   of the next, so a row's reduction and store happen while the next row's bytes arrive;
// - W is read with ld.global.cs (evict first), x through L1 (every warp reads all of it).
// At M > 1 each batch row is an accumulator a lane (MT of them; past MT, W is streamed again
// for the next MT batch rows): this is the M = 1 step, the tensor-core steps are 06's.
// Hypothesis: the bytes never stop: >= 93 % of the read ceiling at 1 x 14336 x 4096 and up,
// faster than cuBLAS on every M = 1 shape of the study.
// What ncu should show: dram__throughput above 02's; issue slots mostly idle; long
// scoreboard the largest stall; no block launched after the first wave.
//
// Sizes: any M, N, K. K % 8 == 0 (16-byte aligned rows) streams; any other K takes a scalar
// walk a row (one BF16 a lane a step). Launch: grid (min(cdiv(N, WARPS), SM_COUNT *
// BLOCKS_SM)), block (32 * WARPS), no shared memory.
#include "decode.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef DEPTH
#define DEPTH 8  // 16-byte loads of W in flight a lane
#endif
#ifndef MT
#define MT 2  // batch rows a pass over W at M > 1 (4 spills at DEPTH 8)
#endif
#ifndef BLOCKS_SM
#define BLOCKS_SM 4  // blocks an SM (the grid's SM_COUNT multiple)
#endif

// y[m0 .. m0 + T) of this warp's rows; T accumulators a lane
template <int T>
__device__ __forceinline__ void stream_rows(int M, int N, int K, int m0,
                                            const __nv_bfloat16* __restrict__ x,
                                            const __nv_bfloat16* __restrict__ W,
                                            __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32;
  const int tw = gridDim.x * WARPS, gw = blockIdx.x * WARPS + threadIdx.x / 32;
  const int c8 = K / 8, steps = (c8 + 31) / 32;  // 16-byte pieces a row; a warp's steps a row
  const uint4* W4 = reinterpret_cast<const uint4*>(W);
  const uint4* X4 = reinterpret_cast<const uint4*>(x);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // the load cursor (row lr, step ls) runs DEPTH steps ahead of the use cursor (ur, us)
  int lr = gw, ls = 0, ur = gw, us = 0;
  uint4 q[DEPTH];
#define ISSUE(slot)                                                        \
  do {                                                                     \
    const int p_ = ls * 32 + lane;                                         \
    slot = lr < N && p_ < c8 ? __ldcs(W4 + (size_t)lr * c8 + p_) : zero; \
    if (++ls == steps) ls = 0, lr += tw;                                   \
  } while (0)
#pragma unroll
  for (int s = 0; s < DEPTH; ++s) ISSUE(q[s]);
  float acc[T];
#pragma unroll
  for (int j = 0; j < T; ++j) acc[j] = 0.0f;
  while (ur < N) {  // the same for the whole warp
#pragma unroll
    for (int s = 0; s < DEPTH; ++s) {
      if (ur >= N) continue;  // the warp's last rows are done (no break: q stays in registers)
      const int p = us * 32 + lane;
      if (p < c8)
#pragma unroll
        for (int j = 0; j < T; ++j)
          if (m0 + j < M) acc[j] = dot8(q[s], __ldg(X4 + (size_t)(m0 + j) * c8 + p), acc[j]);
      ISSUE(q[s]);  // the slot's next step, DEPTH ahead
      if (++us == steps) {  // row ur is done: its sums while the next rows' bytes arrive
#pragma unroll
        for (int j = 0; j < T; ++j) {
          const float v = warp_sum(acc[j]);
          if (lane == 0 && m0 + j < M) y[(size_t)(m0 + j) * N + ur] = __float2bfloat16_rn(v);
          acc[j] = 0.0f;
        }
        us = 0, ur += tw;
      }
    }
  }
#undef ISSUE
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
decode_stream(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
              const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y)
{
  if (K % 8 != 0) {  // rows not 16-byte aligned: a scalar walk of each row (uniform branch)
    const int lane = threadIdx.x % 32, tw = gridDim.x * WARPS;
    for (int n = blockIdx.x * WARPS + threadIdx.x / 32; n < N; n += tw)
      for (int m = 0; m < M; ++m) {
        float acc = 0.0f;
        for (int k = lane; k < K; k += 32)
          acc = fmaf(__bfloat162float(W[(size_t)n * K + k]),
                     __bfloat162float(x[(size_t)m * K + k]), acc);
        acc = warp_sum(acc);
        if (lane == 0) y[(size_t)m * N + n] = __float2bfloat16_rn(acc);
      }
    return;
  }
  if (M == 1) stream_rows<1>(M, N, K, 0, x, W, y);
  else
    for (int m0 = 0; m0 < M; m0 += MT) stream_rows<MT>(M, N, K, m0, x, W, y);
}

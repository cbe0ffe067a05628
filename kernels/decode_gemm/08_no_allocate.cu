// 08_no_allocate: 02's warp per row, its W loads kept out of L1 and 8 of them in flight a lane.
//
// Changed from 02: ncu at 1 x 14336 x 4096 shows 02 latency-bound (long-scoreboard 31 stalls
// an issue, 54 % of warps active) and its L2 serving 180 MB for 117 MB of W from DRAM: x (8 KB,
// read by every warp) misses L1 about half the time, because W's 117 MB go through L1 too
// (__ldg is ld.global.nc: L1-allocating) and evict it. Each 16-byte step of a lane waits for
// both loads, so x's misses add L2 latency to W's DRAM latency. And a lane has 4 steps of
// W in flight (#pragma unroll 4), 2 KB a warp. Here:
// - W by ld.global.nc.L1::no_allocate: W never lands in L1, x stays there (one L2 read of x
//   an SM, not one a warp);
// - UNR = 8 steps of W a lane in flight (4 KB a warp), issued before any is used, the row's
//   remainder (K / 8 not a multiple of 256) one step at a time;
// - two accumulators (even and odd steps), so the FMA chain is half as long.
// At M > 1 each batch row walks the row of W again (from L2), as 02 does: the M = 1 step.
// Hypothesis: with x's L2 trips gone and twice the bytes in flight a warp, >= 90 % of the
// read ceiling at 1 x 14336 x 4096 and up, faster than cuBLAS there.
// What ncu should show: lts__t_bytes close to dram__bytes_read (x from L1); long-scoreboard
// still the largest stall, lower than 02's; dram__throughput above 02's 76 %.
//
// Sizes: any M, N, K. K % 8 == 0 (16-byte aligned rows) takes the vector path, any other K
// a scalar walk (one BF16 a lane a step). Launch: grid (cdiv(N, WARPS)), block (32 * WARPS),
// no shared memory.
#include "decode.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNR
#define UNR 8  // 16-byte steps of W in flight a lane (even: two accumulators)
#endif
static_assert(UNR % 2 == 0, "steps alternate between the two accumulators");

extern "C" __global__ void __launch_bounds__(32 * WARPS)
decode_no_allocate(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                   const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * WARPS + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp: n is the same for its 32 lanes
  const bool vec = K % 8 == 0;
  const __nv_bfloat16* wr = W + (size_t)n * K;
  for (int m = 0; m < M; ++m) {
    const __nv_bfloat16* xr = x + (size_t)m * K;
    float acc0 = 0.0f, acc1 = 0.0f;
    if (vec) {
      const uint4* w4 = reinterpret_cast<const uint4*>(wr);
      const uint4* x4 = reinterpret_cast<const uint4*>(xr);
      const int chunks = K / 8;
      int c = lane;
      for (; c + 32 * (UNR - 1) < chunks; c += 32 * UNR) {  // UNR whole steps of the warp
        uint4 w[UNR];
#pragma unroll
        for (int u = 0; u < UNR; ++u) w[u] = load_w(w4 + c + 32 * u);
#pragma unroll
        for (int u = 0; u < UNR; u += 2) {
          acc0 = dot8(w[u], __ldg(x4 + c + 32 * u), acc0);
          acc1 = dot8(w[u + 1], __ldg(x4 + c + 32 * (u + 1)), acc1);
        }
      }
      for (; c < chunks; c += 32) acc0 = dot8(load_w(w4 + c), __ldg(x4 + c), acc0);
    } else {
      for (int k = lane; k < K; k += 32)
        acc0 = fmaf(__bfloat162float(wr[k]), __bfloat162float(xr[k]), acc0);
    }
    const float acc = warp_sum(acc0 + acc1);
    if (lane == 0) y[(size_t)m * N + n] = __float2bfloat16_rn(acc);
  }
}

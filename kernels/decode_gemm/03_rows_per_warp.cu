// 03_rows_per_warp: each W byte read once for all M; several rows of W a warp.
//
// Changed from 02: a warp owns ROWS consecutive rows of W and computes y[m][n] for all of them
// and for every batch row m in one walk along K. Each step a lane loads 16 bytes of each of its
// ROWS rows (streaming loads, ld.global.cs: W is read once, so it should not evict x from the
// caches) and then, for each batch row, the 16 bytes of x at the same k (__ldg: x is small and
// read by every warp, so it lives in L1/L2), doing ROWS * 8 FMAs per x load. The ROWS * MT
// accumulators are registers: MT is the batch tile, a compile-time 1, 2, 4, 8, 16 or 32 picked
// from M at run time (one instantiation of the body each, a uniform switch), so M = 1 does not
// pay for 32 accumulators in its inner loop; M > 32 walks W once a 32-row chunk of x. The
// reductions are 5 shuffles per accumulator, and the ROWS * MT stores are spread over lanes.
// Why it should help: 02 walks each row of W once per batch row; here it is walked once, so
// W's HBM/L2 traffic is M times smaller at M > 1, and ROWS independent 16-byte loads a lane
// a step put more bytes in flight per warp (memory-level parallelism) at every M. At M = 1
// the gain is the extra bytes in flight: expect ~90 % of cuBLAS at the headline and a
// larger gain over 02 at M = 16.
// What ncu should show: dram__bytes_read ~ 2 * N * K at every M, lts__t_bytes about the same
// plus x's share; at M >= 16 the x loads (L1 hits) dominate the load instructions, so
// l1tex__throughput rises (the SIMT limit a tensor-core step would lift); long-scoreboard
// stalls per instruction below 02's.
//
// Sizes: any M, N, K (rows past N are skipped; K % 8 != 0 takes a scalar path, as in 02).
// Launch: grid (cdiv(N, WARPS * ROWS)), block (32 * WARPS), no shared memory.

#include "decode.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef ROWS
#define ROWS 2
#endif
#define MAX_MT 32

// y[m0 + m][n0 + r] for m < MT (and m0 + m < M), r < ROWS (and n0 + r < N).
template <int MT>
__device__ __forceinline__ void rows_times_batch(int M, int N, int K, int n0, int m0, int lane,
                                                 const __nv_bfloat16* __restrict__ x,
                                                 const __nv_bfloat16* __restrict__ W,
                                                 __nv_bfloat16* __restrict__ y)
{
  float acc[ROWS][MT];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;
  if (K % 8 == 0) {
    const int chunks = K / 8;
    for (int c = lane; c < chunks; c += 32) {
      uint4 w[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        w[r] = n0 + r < N ? __ldcs(reinterpret_cast<const uint4*>(W + (size_t)(n0 + r) * K) + c)
                          : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m0 + m >= M) break;  // the same for every lane
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + (size_t)(m0 + m) * K) + c);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r][m] = dot8(w[r], xv, acc[r][m]);
      }
    }
  } else {  // rows not 16-byte aligned: one element a lane a step
    for (int k = lane; k < K; k += 32) {
      float w[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        w[r] = n0 + r < N ? __bfloat162float(W[(size_t)(n0 + r) * K + k]) : 0.0f;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m0 + m >= M) break;
        const float xv = __bfloat162float(x[(size_t)(m0 + m) * K + k]);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r][m] = fmaf(w[r], xv, acc[r][m]);
      }
    }
  }
  // every lane ends with every sum; output j of the warp is stored by lane j % 32
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float s = warp_sum(acc[r][m]);
      if (lane == (r * MT + m) % 32 && m0 + m < M && n0 + r < N)
        y[(size_t)(m0 + m) * N + n0 + r] = __float2bfloat16_rn(s);
    }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
decode_rows_per_warp(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                     const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  if (n0 >= N) return;  // the whole warp
  if (M <= 1) rows_times_batch<1>(M, N, K, n0, 0, lane, x, W, y);
  else if (M <= 2) rows_times_batch<2>(M, N, K, n0, 0, lane, x, W, y);
  else if (M <= 4) rows_times_batch<4>(M, N, K, n0, 0, lane, x, W, y);
  else if (M <= 8) rows_times_batch<8>(M, N, K, n0, 0, lane, x, W, y);
  else if (M <= 16) rows_times_batch<16>(M, N, K, n0, 0, lane, x, W, y);
  else
    for (int m0 = 0; m0 < M; m0 += MAX_MT) rows_times_batch<MAX_MT>(M, N, K, n0, m0, lane, x, W, y);
}

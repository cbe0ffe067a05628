// 04_split_k: 03's warps with K split across gridDim.y blocks, partial sums combined after.
//
// Changed from 03: the grid gets a second dimension S = gridDim.y (the config computes it
// from N, K and the SM count: enough warps of work for every SM, at most MAX_SPLIT, and at
// least 1024 elements of K a split). Block (bx, s) does 03's work on the columns
// [s * KS, min(K, (s + 1) * KS)) of its rows, KS = K / S rounded up to a multiple of 8 (so
// every split starts 16-byte aligned), and stores its FP32 sums, not BF16, in a workspace:
// partial[s][m][n]. A second kernel (then:) adds the S partials of each y[m][n] in the order
// s = 0, 1, ... (deterministic, no atomics) and rounds once to BF16. Block (0, 0) writes S into
// the workspace's header for it, so the two kernels cannot disagree on S.
// Why it should help: with 03, a short-N, long-K layer such as 4096 x 14336 has only
// N / ROWS = 2048 warps, ~15 a SM on 132 SMs, each walking 28 KiB of W: too few loads in
// flight to cover HBM latency, and a long tail. Splitting K by S = 4 gives 4x the warps, each
// with a quarter of the walk. The cost is the workspace round trip (2 * S * M * N * 4 bytes,
// under 4 % of W's bytes at 4096 x 14336, M = 32) and a second launch (a few microseconds).
// At the headline (N = 14336) S is 1: the same work as 03 plus the combine launch, so it
// should be slightly slower there and faster at 4096 x 14336 and 4096 x 4096.
// What ncu should show: at 4096 x 14336, sm__warps_active and dram__throughput well above 03's;
// a second, small kernel (decode_split_k_combine) reading S * M * N floats.
//
// Sizes: any M, N, K (K % 8 != 0 takes a scalar path, as in 02; a split past K adds zeros).
// Launch: grid (cdiv(N, WARPS * ROWS), S), block (32 * WARPS), no shared memory; then
// decode_split_k_combine on grid (cdiv(M * N, 256)), block (256). Workspace: 256 header bytes,
// then MAX_SPLIT * M * N floats (at least S * M * N).

#include "decode.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef ROWS
#define ROWS 2
#endif
#define MAX_MT 32
#define HEADER_FLOATS 64  // 256 bytes: the split count, then padding (partials stay aligned)

// partial[m0 + m][n0 + r] over columns [k0, k1) (k0 % 8 == 0), m < MT, r < ROWS.
template <int MT>
__device__ __forceinline__ void rows_times_batch(int M, int N, int K, int k0, int k1, int n0,
                                                 int m0, int lane,
                                                 const __nv_bfloat16* __restrict__ x,
                                                 const __nv_bfloat16* __restrict__ W,
                                                 float* __restrict__ partial)
{
  float acc[ROWS][MT];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;
  if (K % 8 == 0) {
    const int c1 = k1 / 8;  // k1 is K or a multiple of 8
    for (int c = k0 / 8 + lane; c < c1; c += 32) {
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
  } else {
    for (int k = k0 + lane; k < k1; k += 32) {
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
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float s = warp_sum(acc[r][m]);
      if (lane == (r * MT + m) % 32 && m0 + m < M && n0 + r < N)
        partial[(size_t)(m0 + m) * N + n0 + r] = s;
    }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
decode_split_k(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
               const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y,
               float* __restrict__ ws)
{
  const int S = gridDim.y, s = blockIdx.y;
  if (blockIdx.x == 0 && s == 0 && threadIdx.x == 0) reinterpret_cast<int*>(ws)[0] = S;
  const int lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  if (n0 >= N) return;  // the whole warp
  const int ks = (K / S + (K % S != 0) + 7) / 8 * 8;  // cdiv(K, S) rounded up to 8
  const int k0 = s * ks < K ? s * ks : K, k1 = k0 + ks < K ? k0 + ks : K;
  float* partial = ws + HEADER_FLOATS + (size_t)s * M * N;
  if (M <= 1) rows_times_batch<1>(M, N, K, k0, k1, n0, 0, lane, x, W, partial);
  else if (M <= 2) rows_times_batch<2>(M, N, K, k0, k1, n0, 0, lane, x, W, partial);
  else if (M <= 4) rows_times_batch<4>(M, N, K, k0, k1, n0, 0, lane, x, W, partial);
  else if (M <= 8) rows_times_batch<8>(M, N, K, k0, k1, n0, 0, lane, x, W, partial);
  else if (M <= 16) rows_times_batch<16>(M, N, K, k0, k1, n0, 0, lane, x, W, partial);
  else
    for (int m0 = 0; m0 < M; m0 += MAX_MT)
      rows_times_batch<MAX_MT>(M, N, K, k0, k1, n0, m0, lane, x, W, partial);
}

// y[i] = bf16(sum over s of partial[s][i]), i < M * N, s in order.
extern "C" __global__ void __launch_bounds__(256)
decode_split_k_combine(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                       const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y,
                       const float* __restrict__ ws)
{
  const int S = reinterpret_cast<const int*>(ws)[0];
  const size_t total = (size_t)M * N;
  const size_t i = (size_t)blockIdx.x * 256 + threadIdx.x;
  if (i >= total) return;
  const float* partial = ws + HEADER_FLOATS;
  float acc = 0.0f;
  for (int s = 0; s < S; ++s) acc += partial[s * total + i];
  y[i] = __float2bfloat16_rn(acc);
}

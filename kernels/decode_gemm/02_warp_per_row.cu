// 02_warp_per_row: a warp per output row n, 16-byte loads, a warp-shuffle reduction.
//
// Changed from 01: a warp, not a thread, owns row n of W (and y[., n] for every batch row).
// Its 32 lanes walk the row together, each loading 16 bytes (8 BF16) of W and the matching
// 16 bytes of x a step: one warp load instruction covers 512 contiguous bytes (4 whole
// 128-byte lines), every sector it fetches fully used. The 8 products a lane gets are FP32
// FMAs into one accumulator; at the end of the row the 32 partial sums are added by 5
// __shfl_xor_sync steps and lane 0 stores y[m][n]. Batch rows are handled one after another,
// each walking the row of W again (L1/L2 hits for m > 0 if the row is still there).
// Why it should help: 01 spends a load instruction on 2 bytes and scatters a warp's loads over
// 32 rows; here each instruction moves 16 bytes a lane, coalesced, so far fewer instructions
// and no wasted sectors. At M = 1 this reads W once, at full line efficiency: expect ~75 % of
// cuBLAS at the headline. At larger M, W is re-read once a batch row: the cost grows ~M-fold
// (from L2 at best), which 03 removes.
// What ncu should show: l1tex sectors per request ~4 for the W and x loads (LDG.E.128),
// dram__bytes_read ~ 2 * N * K at M = 1; at M >= 8 lts__t_bytes well above dram__bytes_read (W
// rows fetched again from L2), and issue stalls on long scoreboard.
//
// Sizes: any M, N, K. K % 8 == 0 (every row 16-byte aligned) takes the vector path, whose
// last step has fewer than 32 active lanes when K / 8 is not a multiple of 32; any other K
// takes a scalar path (one BF16 a lane a step), chosen once per launch (a uniform branch).
// Launch: grid (cdiv(N, WARPS)), block (32 * WARPS), no shared memory.

#include "decode.cuh"

#ifndef WARPS
#define WARPS 4
#endif

extern "C" __global__ void __launch_bounds__(32 * WARPS)
decode_warp_per_row(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                    const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * WARPS + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp: n is the same for its 32 lanes
  const bool vec = K % 8 == 0;
  const __nv_bfloat16* wr = W + (size_t)n * K;
  for (int m = 0; m < M; ++m) {
    const __nv_bfloat16* xr = x + (size_t)m * K;
    float acc = 0.0f;
    if (vec) {
      const uint4* w4 = reinterpret_cast<const uint4*>(wr);
      const uint4* x4 = reinterpret_cast<const uint4*>(xr);
      const int chunks = K / 8;
#pragma unroll 4
      for (int c = lane; c < chunks; c += 32) acc = dot8(__ldg(w4 + c), __ldg(x4 + c), acc);
    } else {
      for (int k = lane; k < K; k += 32)
        acc = fmaf(__bfloat162float(wr[k]), __bfloat162float(xr[k]), acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) y[(size_t)m * N + n] = __float2bfloat16_rn(acc);
  }
}

// 06_mma: W's rows fed to the BF16 tensor cores as they are (mma.sync m16n8k16, FP32
// accumulate), 16 rows a block, K split over its warps, 256 bytes of W in flight a lane.
//
// Changed from 03: 03 is a SIMT dot product, 2 FLOP an FMA lane, and at M = 16 it has 16
// FMAs (and x's conversions) a weight: issue-bound at 28 % of the read ceiling, where cuBLAS
// reads W at HBM speed. Here W is the mma's A operand (rows g and g + 8 of the block's 16,
// g = lane / 4) and x its B operand (8 batch rows an n8 tile, zeros past M): a lane loads
// 32 contiguous bytes of each of its two rows a 64-wide chunk of K (the 4 lanes of a row read
// its 128 bytes), and the same bytes of x, and hands each 32-bit pair to the mma as the
// fragment's (k, k + 1): a permutation of K, the same for W and x, so the dot products are
// unchanged and nothing is converted. A weight costs 1/8 of an mma a lane for every 8 batch
// rows. The WARPS warps of a block take interleaved chunks, UNR of them loaded before any is
// used (16 loads of 16 bytes in flight a lane, 8 KB a warp), and add their tiles through
// shared memory at the end.
// Hypothesis: bound by HBM at every M of the study: >= 90 % of the streaming-read ceiling at
// M = 1 on 14336 x 4096 and larger, faster than cuBLAS there, and within a few percent of
// cuBLAS at M = 16 and 32 (03 is at 28 %).
// What ncu should show: HMMA.16816.F32.BF16 in the SASS and no FFMA in the loop;
// dram__throughput near peak; long-scoreboard stalls the largest.
//
// Sizes: any M, N, K. K % 8 == 0 (16-byte aligned rows) takes 16-byte loads; any other K
// loads 2 bytes at a time (chosen once a launch). Launch: grid (cdiv(N, 16)), block
// (32 * WARPS), static shared memory WARPS * 4 * 4 * 32 floats.
#include "decode.cuh"
#include "../common/mma.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNR
#define UNR 4  // chunks of K a warp loads before using any
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (16 / WARPS)  // 16 warps an SM: at most 128 registers a thread
#endif

typedef float Partials[WARPS][4][4][32];  // each warp's accumulators, lane-major

// 8 bf16 of a row at k (16 bytes; zeros past K, and for a row that is not there): one vector
// load where rows are 16-byte aligned (K % 8 == 0, so 8 elements are all in or all out), else
// 8 guarded 2-byte loads. W is read once (STREAM: ld.global.cs); x is re-read by every block
template <bool STREAM>
__device__ __forceinline__ uint4 load8(const __nv_bfloat16* __restrict__ row, int k, int K,
                                       bool vec)
{
  if (row == nullptr || k >= K) return make_uint4(0, 0, 0, 0);
  if (vec) {
    const uint4* p = reinterpret_cast<const uint4*>(row + k);
    return STREAM ? __ldcs(p) : __ldg(p);
  }
  unsigned h[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = k + i < K ? __bfloat16_as_ushort(row[k + i]) : 0u;
  return make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
}

// y[m0 .. m0 + 8 * MT) x [n0 .. n0 + 16): MT n8 tiles of batch rows
template <int MT>
__device__ __forceinline__ void decode_mma_tile(Partials& part, int M, int N, int K, int m0,
                                                int n0, const __nv_bfloat16* __restrict__ x,
                                                const __nv_bfloat16* __restrict__ W,
                                                __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const bool vec = K % 8 == 0;
  const __nv_bfloat16* wa = n0 + g < N ? W + (size_t)(n0 + g) * K : nullptr;
  const __nv_bfloat16* wb = n0 + g + 8 < N ? W + (size_t)(n0 + g + 8) * K : nullptr;
  const int chunks = (K + 63) / 64;
  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  for (int c0 = warp; c0 < chunks; c0 += WARPS * UNR) {
    uint4 a[UNR][2][2];  // [chunk][row g, g + 8][k + 0, k + 8]
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const int k = (c0 + u * WARPS) * 64 + 16 * t;  // past K for a chunk past the last: zeros
      a[u][0][0] = load8<true>(wa, k, K, vec);
      a[u][0][1] = load8<true>(wa, k + 8, K, vec);
      a[u][1][0] = load8<true>(wb, k, K, vec);
      a[u][1][1] = load8<true>(wb, k + 8, K, vec);
    }
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      if (c0 + u * WARPS >= chunks) break;  // the same for the whole warp
      const int k = (c0 + u * WARPS) * 64 + 16 * t;
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        const int m = m0 + 8 * j + g;  // this lane's batch row of the B fragment
        const __nv_bfloat16* xr = m < M ? x + (size_t)m * K : nullptr;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 xv = load8<false>(xr, k + 8 * h, K, vec);
          const uint4 ra = a[u][0][h], rb = a[u][1][h];
          mma_bf16(acc[j], ra.x, rb.x, ra.y, rb.y, xv.x, xv.y);
          mma_bf16(acc[j], ra.z, rb.z, ra.w, rb.w, xv.z, xv.w);
        }
      }
    }
  }
  sum_warps_store<WARPS, MT>(part, acc, M, N, m0, n0, y);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
decode_mma(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
           const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y)
{
  __shared__ Partials part;
  const int n0 = blockIdx.x * 16;
  if (n0 >= N) return;  // the whole block
  if (M <= 8) decode_mma_tile<1>(part, M, N, K, 0, n0, x, W, y);
  else if (M <= 16) decode_mma_tile<2>(part, M, N, K, 0, n0, x, W, y);
  else
    for (int m0 = 0; m0 < M; m0 += 32) decode_mma_tile<4>(part, M, N, K, m0, n0, x, W, y);
}

// The persistent steps' common parts (07_mma_persistent, 10_ring_persistent, 11_ring_lean): a
// block takes tiles of 16 rows of W in turn, its warps share each tile's scale groups, and the
// tile's sum over the warps goes through a double buffer of partials in shared memory, one
// barrier a tile; the ring steps' (10, 11) chunk layout and scale words.
#pragma once

#include <cuda_bf16.h>

// two tiles' accumulators of NW warps, lane-major: a tile writes one while warp 0 may still be
// reading the other
template <int NW>
using W4Partials = float[2][NW][2][4][32];

// The end of tile ti (rows n0 .. n0 + 16): every warp's acc into the tile's buffer, one
// barrier, then warp 0 sums them and writes y's rows of batch rows m0 .. m0 + 8 MT. The
// other buffer was last read before this barrier's previous crossing, so the next tile's
// partials cannot overwrite what warp 0 reads here.
template <int NW, int MT>
__device__ __forceinline__ void w4_tile_sum(W4Partials<NW>& part, int ti, const float (&acc)[MT][4],
                                            int n0, int m0, int M, int N,
                                            __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  float(&p)[NW][2][4][32] = part[ti & 1];
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) p[warp][j][r][lane] = acc[j][r];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int w = 0; w < NW; ++w)
#pragma unroll
        for (int r = 0; r < 4; ++r) s[r] += p[w][j][r][lane];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int n = n0 + g + (r < 2 ? 0 : 8), m = m0 + 8 * j + 2 * t + r % 2;
        if (n < N && m < M) y[(size_t)m * N + n] = __float2bfloat16_rn(s[r]);
      }
    }
  }
}

// A ring slot holds a chunk: CHUNK_GROUPS scale groups of a tile's 16 rows, 4 CHUNK_GROUPS pieces of
// 16 bytes a row. Row r's piece c sits at c ^ 4 (r & 1): a quarter warp's LDS.128 of the mma pieces
// (rows g, g + 1, pieces 4 j .. 4 j + 3) hits 8 distinct bank quads.
template <int CHUNK_GROUPS>  // not CG: the kernels define CG, as nvcc's -D may
__device__ __forceinline__ int w4_piece(int r, int c)
{
  return r * 4 * CHUNK_GROUPS + (c ^ ((r & 1) << 2));
}

// The scales of groups gi and gi + 1 of row n, as two bf16 in a word (gi low): one 32-bit load
// where the rows' scales are 4-byte aligned (an even number of groups), two 16-bit loads put
// together otherwise (odd K / 128 only; the second 0 past the row's last group).
__device__ __forceinline__ unsigned w4_scale_pair(const __nv_bfloat16* __restrict__ S, int n,
                                                  int gi, int groups)
{
  const unsigned short* bits = reinterpret_cast<const unsigned short*>(S);
  const size_t i = (size_t)n * groups + gi;
  if (groups % 2 == 0) return __ldg(reinterpret_cast<const unsigned*>(bits + i));
  const unsigned hi = gi + 1 < groups ? __ldg(bits + i + 1) : 0u;
  return __ldg(bits + i) | hi << 16;
}

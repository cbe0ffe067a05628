// 13_tiled_w: 09's kernel reading W and the scales in the order it uses them: each warp load
// 512 contiguous bytes, the problem's weights re-laid once, before timing, as an int4
// library repacks a checkpoint when it loads it (the problem's alternative `tiled`).
//
// Changed from 09: the layout only, and with it the addresses. 09 reads the row-major Wq: a
// lane's 16 bytes of rows n0 + g and n0 + g + 8, so one warp instruction touches 8 rows of
// W, 64 bytes in each, 2 KB apart (K = 4096), and each 2-byte scale is a 32-byte sector of
// its own. Here the problem hands the kernel Wt and St (kernelbook.problems.w4a16.tile_pack):
// for each 16-row tile and scale group, the 1024 bytes the tile's warp reads for that group,
// lane by lane (rows n0 + g, then rows n0 + g + 8), and the group's 16 scales in 32 bytes
// (rows g and g + 8 side by side: one 32-bit load a lane gives both);
// a tile's groups one after another, the tiles one after another, rows past N zero. So a
// warp instruction reads 512 contiguous bytes (four 128-byte lines) and a group's scales
// one sector; the mma, the dequantization and the reduction are 09's (w4offset.cuh).
// Why it should help: 09's header measured the read alone (tools/explore/w4_read_pattern.py):
// its grid of 16-row tiles with each lane's 16-byte pieces two rows apart reads 60 MB in
// ~26 us of event time and 263 MB in ~78, the same bytes read contiguously, 512 bytes a
// warp instruction, in ~22.5 and ~65; and lts__t_bytes was 93 MB for 61 MB from DRAM, the
// scales' 2-byte loads a sector each. 10 and 11 also read 512 contiguous bytes a warp
// instruction, but through a shared-memory ring and a persistent grid, and lost to 09
// (0.80x, 0.84x): here the bytes go straight to registers as in 09, with 09's grid.
// Hypothesis: ~13 % off 09's time at both headlines (published at 567eb07/c2337cc: 24.99 us
// at 1 x 28672 x 4096, 2.19x cuBLAS BF16, -> ~22 us, 2.5x; 94.5 us at 1 x 128256 x 4096,
// 2.51x, -> ~82 us, 2.9x, where 3x needs 78.9); lts__t_bytes near dram__bytes_read.
// What ncu should show: dram__throughput up from 09's 50 %, lts__t_bytes down to ~61 MB,
// l1tex__t_sectors_pipe_lsu_mem_global_op_ld per request at 16 (512 B) for W.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(N, 16)), block (32 * WARPS).
#include "w4offset.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNR
#define UNR 4  // scale groups a warp loads before using any
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 5  // blocks an SM: 20 warps of 4, at most 96 registers a thread
#endif

typedef float TiledPartials[WARPS][4][4][32];  // each warp's accumulators, lane-major

// y[m0 .. m0 + 8 * MT) x [n0 .. n0 + 16) of tile `tile`: MT n8 tiles of batch rows
template <int MT>
__device__ __forceinline__ void w4_tiled_tile(TiledPartials& part, int M, int N, int K, int m0,
                                              int tile, const __nv_bfloat16* __restrict__ x,
                                              const uint4* __restrict__ Wt,
                                              const __nv_bfloat16* __restrict__ St,
                                              __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4;
  const int groups = K / 128;
  // group gi of this tile: 64 uint4, rows n0 + g (lanes 0-31), then rows n0 + g + 8
  const uint4* w = Wt + (size_t)tile * groups * 64 + lane;
  // group gi's scales: 8 words, word g the scales of rows n0 + g and n0 + g + 8
  const unsigned* s = reinterpret_cast<const unsigned*>(St) + (size_t)tile * groups * 8 + g;
  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  w += 64 * warp;  // this warp's first group; each pass moves both on by WARPS * UNR groups
  s += 8 * warp;
  for (int g0 = warp; g0 < groups; g0 += WARPS * UNR, w += 64 * WARPS * UNR, s += 8 * WARPS * UNR) {
    uint4 qa[UNR], qb[UNR];
    unsigned sc[UNR];  // the scales of rows n0 + g (low half) and n0 + g + 8 (high half)
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const bool in = g0 + u * WARPS < groups;  // rows past N are zeros: no row guard
      qa[u] = in ? load_w(w + 64 * WARPS * u) : zero;
      qb[u] = in ? load_w(w + 64 * WARPS * u + 32) : zero;
      sc[u] = in ? s[8 * WARPS * u] : 0u;
    }
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const int gi = g0 + u * WARPS;
      if (gi >= groups) break;  // the same for the whole warp
      const float sa = __uint_as_float(sc[u] << 16), sb = __uint_as_float(sc[u] & 0xFFFF0000u);
      w4_group_offset<MT>(acc, qa[u], qb[u], sa, sb, gi, M, K, m0, x);
    }
  }
  sum_warps_store<WARPS, MT>(part, acc, M, N, m0, tile * 16, y);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_tiled_w(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
           const unsigned* __restrict__ Wt, const __nv_bfloat16* __restrict__ St,
           __nv_bfloat16* __restrict__ y)
{
  __shared__ TiledPartials part;
  const int tile = blockIdx.x;
  if (tile * 16 >= N) return;  // the whole block
  const uint4* wt = reinterpret_cast<const uint4*>(Wt);
  if (M <= 8) w4_tiled_tile<1>(part, M, N, K, 0, tile, x, wt, St, y);
  else
    for (int m0 = 0; m0 < M; m0 += 16) w4_tiled_tile<2>(part, M, N, K, m0, tile, x, wt, St, y);
}

// 10_ring_persistent: W read in contiguous chunks through a cp.async ring in shared memory, on
// a persistent grid of two 8-warp blocks an SM, with 09's zero point in the mma.
//
// Changed from 09: 09 is within ~2 us of what its grid can read at all. The same grid reading
// W and doing nothing else (tools/explore/w4_read_pattern.py, event time) takes 24-27 us for
// the 60 MB at N = 28672 and 76-79 us for the 263 MB at 128256 when each lane reads the
// mma's pieces (16 bytes of rows g and g + 8, 64 bytes of a row a warp instruction), and
// 22-23 and 65-66 us when a warp instruction reads 512 contiguous bytes. 07's persistent grid
// did not help either, with the same pieces and 4 groups in flight in registers. Here:
// - a warp's unit of W is a chunk: CG = 2 scale groups of the tile's 16 rows (128 contiguous
//   bytes, a whole L2 line, of each row; 2 KB), copied by cp.async.cg (L2 only) 512 bytes a
//   warp instruction (4 rows' whole lines), into a slot of the warp's ring of STAGES; STAGES - 1
//   chunks are in flight while one is computed (6 KB a warp at STAGES = 4), 16 warps an SM
//   (CG = 4, 256 bytes a row, spilled at 128 registers while the scales were floats);
// - in the slot, row r's 16-byte piece c sits at c ^ 4 (r & 1): a quarter warp's LDS.128 of
//   the mma pieces (rows g, g + 1, pieces 4 j .. 4 j + 3) hits 8 distinct bank quads;
// - a lane reads back pieces other lanes copied: cp.async.wait_group, then __syncwarp; and
//   __syncwarp again before a slot is refilled (no block barrier);
// - the scales ride with the chunk: a 32-bit word (two bf16) a row into a register, loaded
//   when the chunk is issued;
// - the grid is 07's: as few blocks as hold every tile at BLOCKS_SM blocks an SM with as many
//   tiles each; a tile's chunks go to the block's warps in turn (warp w: chunks w, w + WARPS,
//   ...), every warp the same number of steps a tile, and the sum over the warps at a tile's
//   end is one barrier (07's double-buffered partials) while the ring's next chunks arrive;
// - the products are 09's (w4offset.cuh). Past 8 batch rows W is streamed once for every 16.
// Hypothesis: the read as fast as contiguous reads go (~4 TB/s at 263 MB), the compute hidden
// under it: >= 75 % of the read ceiling at 1 x 28672 x 4096 and >= 3x cuBLAS BF16 on
// 28672 x 4096 and 128256 x 4096.
// What ncu should show: LDGSTS.E.BYPASS.128 and LDS.128 for W, no LDG.E.*.128; dram__throughput
// well above 09's 50 %; launch__grid_size 264 at N = 28672 on 132 SMs; shared-memory bank
// conflicts near zero.
//
// Measured (published at 71a18de, CUPTI kernel time): refuted. 31.3 us at 1 x 28672 x 4096
// against 09's 25.2 (0.80x), 115.9 us against 95.5 at 1 x 128256; STAGES = 6 slower still
// (48.0 us). ncu at 1 x 28672 (quick loop): long-scoreboard stalls fell from 4.6 to 1.0 a
// issue and bank conflicts to ~0, as meant, but the kernel issues 13.2 M warp instructions
// against 09's 9.3 M (the copy addressing and predicates of every chunk, a barrier every 2
// chunks a warp at K = 4096), its 5000 SASS instructions (09: 1144; the loop unrolled by
// STAGES for M <= 8 and again for the passes) miss in the instruction cache (no-instruction
// stalls 0.92 a issue against 0.09), and DRAM throughput fell from 49 % to 40 %. Both
// kernels issue on ~45 % of cycles with the ALU pipe at ~50 %: what limits them is
// instructions a weight, not how W is read.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(tiles, cdiv(tiles, SM_COUNT *
// BLOCKS_SM)), tiles = cdiv(N, 16)), block (32 * WARPS), dynamic shared memory
// WARPS * STAGES * CG * 1 KB, static 2 * WARPS * 2 * 4 * 32 floats.
#include "../common/cp_async.cuh"
#include "w4offset.cuh"
#include "w4tiles.cuh"

#ifndef WARPS
#define WARPS 8
#endif
#ifndef CG
#define CG 2  // scale groups a chunk: 64 CG bytes of each of the tile's 16 rows
#endif
#ifndef STAGES
#define STAGES 4  // a warp's ring of chunks: STAGES - 1 in flight while one is computed
#endif
#ifndef BLOCKS_SM
#define BLOCKS_SM 2  // blocks an SM: 16 warps, at most 128 registers a thread
#endif
static_assert(CG == 2, "a chunk's rows: 8 pieces of 16 bytes; its two scales one 32-bit word");
static_assert(STAGES >= 2, "a slot in flight beside the one computed");

constexpr int PIECES = 16 * 4 * CG;  // 16-byte pieces a chunk (a slot)

typedef W4Partials<WARPS> Partials2;

// where piece c of row r of a chunk sits in its slot
__device__ __forceinline__ int piece(int r, int c) { return w4_piece<CG>(r, c); }

// y[m0 .. m0 + 8 * MT) of this block's tiles: MT n8 tiles of batch rows
template <int MT>
__device__ __forceinline__ void w4_ring_rows(Partials2& part, uint4* ring, int M, int N, int K,
                                             int m0, const __nv_bfloat16* __restrict__ x,
                                             const unsigned* __restrict__ Wq,
                                             const __nv_bfloat16* __restrict__ S,
                                             __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int groups = K / 128, chunks = (groups + CG - 1) / CG;  // a row's
  const int cpt = (chunks + WARPS - 1) / WARPS;  // a warp's steps a tile: chunk warp + s WARPS
  // no division by the grid (an integer divide is an I2F and a MUFU.RCP): the cursors stop at N
  const int stride = 16 * (int)gridDim.x, first = 16 * (int)blockIdx.x;
  const uint4* wq = reinterpret_cast<const uint4*>(Wq);
  uint4* mine = ring + warp * STAGES * PIECES;

  unsigned sa[STAGES], sb[STAGES];  // each slot's chunk's scales of rows g and g + 8
  // the load cursor: tile row ln0, step ls of it; it runs STAGES - 1 steps ahead of the use
  // and on past the stream's end, where it copies nothing (ln0 >= N: zero-fills)
  int ln0 = first, ls = 0;
  auto issue = [&](uint4* slot, unsigned& s_a, unsigned& s_b) {
    const int ci = warp + ls * WARPS;
    const bool in = ci < chunks && ln0 < N;
#pragma unroll
    for (int k = 0; k < PIECES / 32; ++k) {  // row r's piece c: 32 a warp instruction
      const int f = 32 * k + lane, r = f / (4 * CG), c = f % (4 * CG), n = ln0 + r;
      const bool ok = in && n < N && ci * CG + c / 4 < groups;
      copy16(slot + piece(r, c), wq + (ok ? (size_t)n * (K / 32) + ci * 4 * CG + c : 0), ok);
    }
    commit_copies();
    const int ra = ln0 + g, rb = ra + 8;
    s_a = in && ra < N ? w4_scale_pair(S, ra, ci * CG, groups) : 0u;
    s_b = in && rb < N ? w4_scale_pair(S, rb, ci * CG, groups) : 0u;
    if (++ls == cpt) ls = 0, ln0 += stride;
  };
#pragma unroll
  for (int d = 0; d < STAGES - 1; ++d) issue(mine + d * PIECES, sa[d], sb[d]);

  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  int n0 = first, us = 0, ti = 0;  // the use cursor: tile row n0, step us of it, tile count
  // the block's k-th step in slot k % STAGES: the loop unrolled by STAGES, so that the scales'
  // slots are constants
  while (n0 < N) {
#pragma unroll
    for (int d = 0; d < STAGES; ++d) {
      if (n0 >= N) break;  // the same for the whole block
      const int nd = (d + STAGES - 1) % STAGES;  // the slot computed last: refilled now
      __syncwarp();  // every lane has read it
      issue(mine + nd * PIECES, sa[nd], sb[nd]);
      wait_copies<STAGES - 1>();  // this lane's copies of step k0 + d have landed
      __syncwarp();  // and every other lane's
      const int ci = warp + us * WARPS;
      if (ci < chunks) {
        const uint4* sl = mine + d * PIECES;
#pragma unroll
        for (int j = 0; j < CG; ++j) {
          const int gi = ci * CG + j;
          if (gi >= groups) break;  // the same for the whole warp
          // bf16 to float: the word's half moved to the top
          const float s_a = __uint_as_float(j == 0 ? sa[d] << 16 : sa[d] & 0xFFFF0000u);
          const float s_b = __uint_as_float(j == 0 ? sb[d] << 16 : sb[d] & 0xFFFF0000u);
          w4_group_offset<MT>(acc, sl[piece(g, 4 * j + t)], sl[piece(g + 8, 4 * j + t)], s_a,
                              s_b, gi, M, K, m0, x);
        }
      }
      if (++us == cpt) {  // the tile's last step: its sum over the warps, and y
        w4_tile_sum<WARPS, MT>(part, ti, acc, n0, m0, M, N, y);
#pragma unroll
        for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        us = 0, n0 += stride, ++ti;
      }
    }
  }
  // what is left in flight is zero-fills past the stream: landed before another pass over W
  // (M > 16) copies into the same slots, and the partials read before they are written again
  wait_copies<0>();
  __syncthreads();
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, BLOCKS_SM)
w4_ring_persistent(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                   const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
                   __nv_bfloat16* __restrict__ y)
{
  __shared__ Partials2 part;
  DYNAMIC_SMEM_U4(ring);
  if (M <= 8) w4_ring_rows<1>(part, ring, M, N, K, 0, x, Wq, S, y);
  else
    for (int m0 = 0; m0 < M; m0 += 16) w4_ring_rows<2>(part, ring, M, N, K, m0, x, Wq, S, y);
}

// 11_ring_lean: 10's contiguous cp.async reads with the instructions 10 added taken out: one
// loop body instead of STAGES, unpredicated copies for whole chunks, a barrier every 4 chunks
// a warp instead of 2.
//
// Changed from 10: 10 read W as meant (long-scoreboard stalls 1.0 a issue against 09's 4.6,
// bank conflicts ~0) and was 0.80x of 09 at 1 x 28672 x 4096. ncu: 13.2 M warp instructions
// against 09's 9.3 M, 5000 SASS instructions against 1144 (its loop unrolled STAGES times
// so that each step's scales sit in registers of a constant index, and every copy of every
// chunk predicated on its row and group), no-instruction stalls 0.92 a issue against 0.09 (the
// instruction cache), DRAM 40 % against 49 %. Here:
// - the loop is not unrolled: the slot a step computes is a counter, and the scales of the
//   chunks in flight are a queue of STAGES - 1 register pairs, shifted by one a step (a few
//   MOVs), so that each is read at a constant index;
// - a chunk whose 16 rows and CG groups all exist (every chunk but those of a ragged N or an
//   odd K / 128) is copied with no predicate: one base address, the other three copies at
//   constant offsets; the rest as 10 copies them;
// - 4 warps a block: at K = 4096 a warp takes 4 of a tile's 16 chunks, so the barrier at a
//   tile's end comes every 4 chunks, not 2; the partials' double buffer is half 10's. 3 blocks
//   an SM (12 warps, 24 KB of W in flight a block at STAGES = 3): the M > 8 path's two n8
//   tiles take ~170 registers in this loop (88 at M <= 8) and spill at 4 blocks' 128.
// The products are 09's (w4offset.cuh); the ring, swizzle, persistent grid and tile sums are
// 10's.
// Hypothesis: 10's read at about 09's instructions a weight: faster than 09 at both headlines,
// >= 70 % of the read ceiling at 1 x 28672 x 4096.
// What ncu should show: ~9-10 M warp instructions at 1 x 28672 x 4096, ~2300 SASS
// instructions (10: 5000; both batch paths), no-instruction stalls near 09's,
// long-scoreboard stalls near 10's, DRAM throughput above 09's 49 %.
// Measured (H200; quick loop at b452985, ncu at 6f63531, both at 1 x 28672 x 4096): refuted.
// 30.3 us at STAGES 3 (31.7 at 4) against 09's 25.2 (0.83x), 54.0 against 51.6 at
// 16 x 28672, 114.2 against 95.8 at 1 x 128256. ncu: 12.1 M warp instructions (09: 9.3 M,
// 10: 13.2 M), no-instruction stalls 0.18 a issue (10: 1.11) and long-scoreboard 0.89 (09:
// 4.67): what the step set out to fix, it fixed. But DRAM throughput 42.7 % (09: 49.0 %):
// 166 registers a thread (the kernel's both batch paths are one function, so M = 1 pays
// the M > 8 path's registers) hold it to 3 blocks an SM, 10.4 warps active a cycle against
// 09's 18.1: fewer warps, and fewer reads in flight, to cover DRAM's latency. 09's plain
// loads, 5 blocks of 96 registers, stay ahead. Next: the batch paths as two kernels (88
// registers at M <= 8 would allow 5 blocks).
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(tiles, cdiv(tiles, SM_COUNT *
// BLOCKS_SM)), tiles = cdiv(N, 16)), block (32 * WARPS), dynamic shared memory
// WARPS * STAGES * CG * 1 KB, static 2 * WARPS * 2 * 4 * 32 floats.
#include "../common/cp_async.cuh"
#include "w4offset.cuh"
#include "w4tiles.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef CG
#define CG 2  // scale groups a chunk: 64 CG bytes of each of the tile's 16 rows
#endif
#ifndef STAGES
#define STAGES 3  // a warp's ring of chunks: STAGES - 1 in flight while one is computed
#endif
#ifndef BLOCKS_SM
#define BLOCKS_SM 3  // blocks an SM: 12 warps, at most 170 registers a thread
#endif
static_assert(CG == 2, "a chunk's rows: 8 pieces of 16 bytes; its two scales one 32-bit word");
static_assert(STAGES >= 2, "a slot in flight beside the one computed");

constexpr int PIECES = 16 * 4 * CG;  // 16-byte pieces a chunk (a slot)

typedef W4Partials<WARPS> Partials2;

// where piece c of row r of a chunk sits in its slot
__device__ __forceinline__ int piece(int r, int c) { return w4_piece<CG>(r, c); }

// y[m0 .. m0 + 8 * MT) of this block's tiles: MT n8 tiles of batch rows
template <int MT>
__device__ __forceinline__ void w4_lean_rows(Partials2& part, uint4* ring, int M, int N, int K,
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

  // a lane's first copy of a whole chunk: row lane / 8 of the chunk, piece lane % 8; its
  // k-th copy is 4 k rows further on, 32 k pieces further on in the slot
  const int lrow = lane / (4 * CG), lpiece = lane % (4 * CG);
  const int ldst = piece(lrow, lpiece);
  const size_t row4 = (size_t)(32 / (4 * CG)) * (K / 32);  // a copy instruction's 4 rows
  // the load cursor: tile row ln0, step ls of it; it runs STAGES - 1 steps ahead of the use
  // and on past the stream's end, where it copies nothing (ln0 >= N: zero-fills)
  int ln0 = first, ls = 0;
  auto issue = [&](uint4* slot, unsigned& s_a, unsigned& s_b) {
    const int ci = warp + ls * WARPS;
    const bool in = ci < chunks && ln0 < N;
    if (in && ln0 + 16 <= N && (ci + 1) * CG <= groups) {  // the whole chunk: no predicate
      const uint4* src = wq + (size_t)(ln0 + lrow) * (K / 32) + ci * 4 * CG + lpiece;
#pragma unroll
      for (int k = 0; k < PIECES / 32; ++k) copy16(slot + ldst + 32 * k, src + k * row4, true);
    } else {
#pragma unroll
      for (int k = 0; k < PIECES / 32; ++k) {  // row r's piece c: 32 a warp instruction
        const int f = 32 * k + lane, r = f / (4 * CG), c = f % (4 * CG), n = ln0 + r;
        const bool ok = in && n < N && ci * CG + c / 4 < groups;
        copy16(slot + piece(r, c), wq + (ok ? (size_t)n * (K / 32) + ci * 4 * CG + c : 0), ok);
      }
    }
    commit_copies();
    const int ra = ln0 + g, rb = ra + 8;
    s_a = in && ra < N ? w4_scale_pair(S, ra, ci * CG, groups) : 0u;
    s_b = in && rb < N ? w4_scale_pair(S, rb, ci * CG, groups) : 0u;
    if (++ls == cpt) ls = 0, ln0 += stride;
  };
  // the scales of the chunks in flight, oldest first: shifted by one a step, so that every
  // index is a constant and the loop need not be unrolled
  unsigned qa[STAGES - 1], qb[STAGES - 1];
#pragma unroll
  for (int d = 0; d < STAGES - 1; ++d) issue(mine + d * PIECES, qa[d], qb[d]);

  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // the use cursor: tile row n0, step us of it, tile count, and the slot it computes
  int n0 = first, us = 0, ti = 0, use = 0;
#pragma unroll 1
  while (n0 < N) {  // the same for the whole block
    const int fill = use == 0 ? STAGES - 1 : use - 1;  // the slot computed last: refilled now
    __syncwarp();  // every lane has read it
    unsigned na, nb;
    issue(mine + fill * PIECES, na, nb);
    const unsigned sa = qa[0], sb = qb[0];
#pragma unroll
    for (int d = 0; d + 1 < STAGES - 1; ++d) qa[d] = qa[d + 1], qb[d] = qb[d + 1];
    qa[STAGES - 2] = na, qb[STAGES - 2] = nb;
    wait_copies<STAGES - 1>();  // this lane's copies of this step's chunk have landed
    __syncwarp();  // and every other lane's
    const int ci = warp + us * WARPS;
    if (ci < chunks) {
      const uint4* sl = mine + use * PIECES;
#pragma unroll
      for (int j = 0; j < CG; ++j) {
        const int gi = ci * CG + j;
        if (gi >= groups) break;  // the same for the whole warp
        // bf16 to float: the word's half moved to the top
        const float s_a = __uint_as_float(j == 0 ? sa << 16 : sa & 0xFFFF0000u);
        const float s_b = __uint_as_float(j == 0 ? sb << 16 : sb & 0xFFFF0000u);
        w4_group_offset<MT>(acc, sl[piece(g, 4 * j + t)], sl[piece(g + 8, 4 * j + t)], s_a, s_b,
                            gi, M, K, m0, x);
      }
    }
    if (++us == cpt) {  // the tile's last step: its sum over the warps, and y
      w4_tile_sum<WARPS, MT>(part, ti, acc, n0, m0, M, N, y);
#pragma unroll
      for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
      us = 0, n0 += stride, ++ti;
    }
    use = use + 1 == STAGES ? 0 : use + 1;
  }
  // what is left in flight is zero-fills past the stream: landed before another pass over W
  // (M > 16) copies into the same slots, and the partials read before they are written again
  wait_copies<0>();
  __syncthreads();
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, BLOCKS_SM)
w4_ring_lean(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                   const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
                   __nv_bfloat16* __restrict__ y)
{
  __shared__ Partials2 part;
  DYNAMIC_SMEM_U4(ring);
  if (M <= 8) w4_lean_rows<1>(part, ring, M, N, K, 0, x, Wq, S, y);
  else
    for (int m0 = 0; m0 < M; m0 += 16) w4_lean_rows<2>(part, ring, M, N, K, m0, x, Wq, S, y);
}

// 17_chunk_blocks: 16's lean scale group on a grid of small blocks, each warp one chunk of CG
// groups of a tile, so that the GPU's block scheduler hands out the work in pieces a fraction of
// 13's: a warp that finishes early frees its slot for the next chunk.
//
// Changed from 16: who decides which warp reads what. 15 and 16 cut the (tile, scale group)
// units in advance, one run a warp within a unit of each other, and lost to 13's 1792 blocks
// of one tile each (15's ncu at 1 x 28672 x 4096, measured at 1917446: the SMs active 79 % of
// the elapsed cycles against 13's 82 %, DRAM 48.8 % of peak against 57.2 %): the same number
// of units is not the same time, since each warp waits on its own DRAM channels, and a warp
// that ends first has nothing left to take. 13's block scheduler gives a freed SM the next
// tile, but only a whole tile of 4 warps of 8 groups each, and the tile's last warp holds its
// block. A counter in global memory that every warp asks for its next chunk was scouted first
// and lost to 13 at every chunk length: the adds on one address are served one at a time.
// Here the units are cut into chunks of CG groups of one tile (a tile's last chunk shorter
// where CG does not divide K / 128), in Wt's order, a chunk a warp and WARPS chunks a block; the
// hardware's block scheduler is the counter. Each warp sums x over its own chunk's groups for
// the batch rows there are (the zero point, -136 sum x, as 16 takes it from shared memory),
// after its first loads of W are on their way. A chunk's sum is a piece of its tile, left in
// the chunk's own slot of the workspace; the warp whose release add completes the tile's count
// adds the tile's pieces in chunk order (the same sum whichever warps did the chunks) and
// stores y, as in 15. With PREFETCH 1 a warp loads its chunk's next group before it uses the
// one in hand.
// Batch rows go 8 a pass, each pass its own pieces and counts; a chunk's passes follow each
// other in its warp (W read again from L2).
// Hypothesis: the SMs busy to the end at 16's cost a group: below 19.98 us at 1 x 28672 x 4096
// (3x cuBLAS BF16 beside it in the run at 1917446), ~10 % off 13's 20.70.
// What ncu should show: sm__cycles_active above 13's 82 % of the elapsed cycles, DRAM throughput
// above 13's 57.2 % of peak, lts__t_bytes within ~10 % of 13's 93 MB (pieces of CG groups).
// Measured (H200, the study's run at cbb1177, CUPTI kernel time; ncu under its own clocks):
// refuted. At 1 x 28672 x 4096 the winner (WARPS 1, CG 8, PREFETCH 0) takes 23.78 us against
// 13's 20.74 beside it, and the shorter the chunks the slower (CG 2: 34 to 41 us, CG 4: 26 to
// 29, CG 8: 24 to 28); 85.01 against 79.58 us at 1 x 128256 x 4096. ncu at 1 x 28672: the SMs
// are busier than under 13, as meant (sm__cycles_active 39557 of 46301 elapsed, 85 %, against
// 13's 33741 of 40926, 82 %), but each is slower at it: DRAM 51.0 % of peak against 57.2 %,
// lts__t_bytes 105 MB against 93 MB (the pieces), and a piece's release add and the finisher's
// reads are on the warp's path. So what keeps 13 from the read ceiling is not the SMs it leaves
// idle at the end. Next (18): 16's leaner group in 13's walk, and no pieces.
//
// The workspace (zeroed once, when the launcher is made): for each pass a count a tile, then for
// each pass a slot of 16 x 8 floats a chunk. A tile's finisher sets its count back to 0, so the
// next launch finds the workspace as the first did.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (chunks / WARPS rounded up), block
// (32 * WARPS), the workspace after y.
#include "w4even.cuh"

#ifndef WARPS
#define WARPS 1
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (32 / WARPS)  // 32 warps an SM of 64 registers, as 13's and 16's winners
#endif
#ifndef CG
#define CG 4  // scale groups a chunk
#endif
#ifndef PREFETCH
#define PREFETCH 0  // 1: a warp loads its chunk's next group before it uses the one it has
#endif

// The chunk's piece of its tile for pass `pass` into the chunk's slot and the tile's count;
// the warp whose add completes the count adds the tile's pieces in chunk order and stores y.
__device__ __forceinline__ void chunk_piece(const float (&acc)[4], int pass, int chunk, int M,
                                            int N, int K, __nv_bfloat16* __restrict__ y,
                                            unsigned char* __restrict__ workspace)
{
  const int lane = even_tid() % 32, g = lane / 4, t = lane % 4, m0 = 8 * pass;
  const int T = (N + 15) / 16, cpt = (K / 128 + CG - 1) / CG, C = T * cpt, tile = chunk / cpt;
  unsigned* const counts = reinterpret_cast<unsigned*>(workspace);
  float* const slots = reinterpret_cast<float*>(counts + (size_t)(M + 7) / 8 * T);
  float* const slot = slots + ((size_t)pass * C + chunk) * EVEN_SLOT;
#pragma unroll
  for (int r = 0; r < 4; ++r)
    if (m0 + 2 * t + r % 2 < M) slot[even_at(r, g, t)] = acc[r];
  __syncwarp();  // every lane's stores before lane 0's release
  unsigned done = 0;
  if (lane == 0) done = even_add_release(&counts[(size_t)pass * T + tile], 1u) + 1;
  done = __shfl_sync(0xffffffffu, done, 0);
  if (done != (unsigned)cpt) return;
  even_acquire();  // lane 0's add read the count: every piece of the tile is visible
  __syncwarp();
  float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const float* p = slots + ((size_t)pass * C + (size_t)tile * cpt) * EVEN_SLOT;
  for (int q = 0; q < cpt; ++q, p += EVEN_SLOT)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (m0 + 2 * t + r % 2 < M) sum[r] += even_load_piece(p + even_at(r, g, t));
  even_store(sum, M, N, m0, tile * 16, g, t, y);
  if (lane == 0) counts[(size_t)pass * T + tile] = 0;  // 0 again for the next launch
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_chunk_blocks(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                const unsigned* __restrict__ Wt, const __nv_bfloat16* __restrict__ St,
                __nv_bfloat16* __restrict__ y, unsigned char* __restrict__ workspace)
{
  __shared__ float zs[WARPS][8 * CG];  // each warp's -136 sum x, its chunk's groups x 8 rows
  const int lane = threadIdx.x % 32, G = K / 128, cpt = (G + CG - 1) / CG;
  const int c = blockIdx.x * WARPS + threadIdx.x / 32;  // this warp's chunk
  if (c >= (N + 15) / 16 * cpt) return;                 // the whole warp
  float* const z = zs[threadIdx.x / 32];
  const int tile = c / cpt, gb = (c - tile * cpt) * CG, ge = min(G, gb + CG);
  for (int m0 = 0; m0 < M; m0 += 8) {  // the chunk's pieces, 8 batch rows each
    const size_t u = (size_t)tile * G + gb;
    const uint4* w = reinterpret_cast<const uint4*>(Wt) + u * 64 + lane;
    const unsigned* sp = reinterpret_cast<const unsigned*>(St) + u * 8 + lane / 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // the first group's loads on their way while the warp sums x
    uint4 qa = load_w(w), qb = load_w(w + 32);
    unsigned sc = __ldg(sp);
    even_warp_x_sums(z, M, K, m0, gb, ge - gb, 1, x);
    for (int gi = gb; gi < ge; ++gi) {
      w += 64;
      sp += 8;
      uint4 na = qa, nb = qb;
      unsigned ns = sc;
#if PREFETCH
      if (gi + 1 < ge) na = load_w(w), nb = load_w(w + 32), ns = __ldg(sp);
#endif
      const float sa = __uint_as_float(sc << 16), sb = __uint_as_float(sc & 0xFFFF0000u);
      even_group_lean(acc, qa, qb, sa, sb, gi, M, K, m0, x, z, gi - gb);
#if !PREFETCH
      if (gi + 1 < ge) na = load_w(w), nb = load_w(w + 32), ns = __ldg(sp);
#endif
      qa = na, qb = nb, sc = ns;
    }
    // y directly where the chunk is the whole tile, else a piece of it
    if (cpt == 1) even_store(acc, M, N, m0, tile * 16, lane / 4, lane % 4, y);
    else chunk_piece(acc, m0 / 8, c, M, N, K, y, workspace);
  }
}

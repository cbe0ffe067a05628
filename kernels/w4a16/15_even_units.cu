// 15_even_units: 13's loads and mmas on a persistent grid that gives every warp the same number
// of (tile, scale group) units; a tile split between warps is added through the workspace.
//
// Changed from 13: the split of the work. 13 gives each block one 16-row tile (4 warps, 8 scale
// groups each at K = 4096): 1792 blocks at 1 x 28672 x 4096, 1.7 waves of the 1056 an H200 holds
// (8 an SM). Its published profile (measured at 2ea551c) shows what the second wave, 70 % full,
// costs: the SMs are active 87 % of the elapsed cycles (sm__cycles_active 33970 of 38976), and
// the achieved occupancy is 41.7 % against the 50 % the launch allows. The walk is latency-bound
// (a warp keeps one group in flight), so a partial wave reads at the rate of the warps it has.
// Here the grid is the blocks the GPU holds at once (SM_COUNT * MIN_BLOCKS), and the units,
// tile after tile and group after group within a tile (the order of Wt and St, so that a
// warp's run is one contiguous stretch of both), are cut into one run a warp, their lengths
// within one unit of each other. A warp walks its run as 13's warp walks its groups. Where the
// run leaves a tile or ends, the warp either stores the tile's y itself (it held all of the
// tile's groups) or leaves its piece, the C fragment's registers, in the workspace and adds
// the groups it held to the tile's counter; the warp whose add completes the count adds every
// piece of the tile in warp order (the same sum whichever warp finishes) and stores y. No
// barrier, no waiting on another warp: a piece's stores, then the add as a release (one MEMBAR a
// piece); the finisher's acquire fence, then its reads of the pieces from L2.
// PREFETCH 1 (tuned): within a tile's piece, the next unit's W and scales are loaded before the
// unit in hand is used, two groups in flight a warp, at 72 registers or more. ptxas places the
// loads after half of the unit's mmas (volatile loads land there too).
// Batch rows go 8 a pass (13's MT = 1 loop; at M > 8 W is read once a pass, where 13 reads it
// once for 16 batch rows): 13's MT = 2 loop with the run's bounds live beside it does not fit
// 64 registers.
// Hypothesis: the SMs busy to the end at the rate of 13's full wave: ~13 % off 13's 20.8 us at
// 1 x 28672 x 4096 (~18.1 us, 3.1x cuBLAS BF16); little at 1 x 128256 x 4096 (7.2 waves of
// 13's blocks).
// What ncu should show: sm__cycles_active near the elapsed cycles, the achieved occupancy near
// the launch's, dram__throughput up by the same ~13 %.
// Measured (H200, the study's run at 1917446, CUPTI kernel time; ncu under its own clocks):
// refuted. At 1 x 28672 x 4096 the winner (WARPS 8, MIN_BLOCKS 4, PREFETCH 0) takes 23.76 us
// against 13's 20.70 beside it (249 % of cuBLAS BF16 against 290 %); 87.2 against 79.5 us at
// 1 x 128256 x 4096; no PREFETCH 1 candidate wins anywhere. ncu at 1 x 28672: the SMs are no
// busier than under 13 (sm__cycles_active 38029 of 48215 elapsed, 79 %, against 13's 33476 of
// 40722, 82 %), DRAM 48.8 % of peak against 57.2 %, lts__t_bytes 103 MB against 93 MB (the
// pieces). So 13's idle time is not its partial wave: a static cut gives every warp the same
// units but not the same time (each waits on its own DRAM channels), and the warps that end
// first cannot take work, where 13's 1792 small blocks go to whichever SM frees up. Next:
// units handed out as they are asked for (a counter), not cut in advance.
//
// The workspace (zeroed once, when the launcher is made), for each pass: one counter a tile, then
// two slots for each of MAX_WARPS warps (a run holds at most a first and a last partial tile),
// 16 x 8 floats each. A tile's finisher sets its counter back to 0, so the next launch finds it
// so. Each pass has its own counters and slots: a warp may start pass p + 1 while another is
// still in pass p.
//
// Built with EVEN_LEAN 1 (16_even_lean), a group is 14's leaner one (even_group_lean) and the
// block sums x into shared memory once a pass.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (min(MAX_WARPS / WARPS, SM_COUNT *
// MIN_BLOCKS, units / WARPS rounded up)), block (32 * WARPS), the workspace after y.
#include "w4even.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 8  // blocks an SM: 32 warps of 64 registers, as 13's winner
#endif
#ifndef EVEN_LEAN
#define EVEN_LEAN 0  // 1: 16_even_lean's group (see even_group_lean)
#endif
#ifndef PREFETCH
#define PREFETCH 0  // 1: a warp loads its next unit before it uses the one it has
#endif
#ifndef MAX_WARPS
#error "MAX_WARPS (the warps the workspace has slots for) must be defined"
#endif

// the warp whose run holds unit u (R runs of base + 1 units, then runs of base)
__device__ __forceinline__ int even_warp_of(int u, int base, int R)
{
  const int big = R * (base + 1);
  return u < big ? u / (base + 1) : R + (u - big) / base;
}

// This warp's piece of `tile` (its run's first tile: slot 0; its last: slot 1) into pass
// `pass`'s slots, its `groups` added to the tile's count; the warp whose add completes the
// count adds every piece of the tile in warp order and stores y.
__device__ __forceinline__ void even_piece(const float (&acc)[4], int pass, int tile, int groups,
                                           bool first, int base, int R, int M, int N, int K,
                                           __nv_bfloat16* __restrict__ y,
                                           unsigned char* __restrict__ workspace)
{
  const int tid = even_tid(), lane = tid % 32, g = lane / 4, t = lane % 4, m0 = 8 * pass;
  const int G = K / 128, W = gridDim.x * WARPS, wid = blockIdx.x * WARPS + tid / 32;
  // pass `pass`'s part of the workspace: a counter a tile, then two slots a warp
  const int T = (N + 15) / 16;
  unsigned* const counts = reinterpret_cast<unsigned*>(workspace) +
                           (size_t)pass * (T + (size_t)MAX_WARPS * 2 * EVEN_SLOT);
  float* const slots = reinterpret_cast<float*>(counts + T);
  float* const slot = slots + ((size_t)wid * 2 + (first ? 0 : 1)) * EVEN_SLOT;
#pragma unroll
  for (int r = 0; r < 4; ++r)
    if (m0 + 2 * t + r % 2 < M) slot[even_at(r, g, t)] = acc[r];
  __syncwarp();  // every lane's stores before lane 0's release
  unsigned done = 0;
  if (lane == 0) done = even_add_release(&counts[tile], (unsigned)groups) + groups;
  done = __shfl_sync(0xffffffffu, done, 0);
  if (done != (unsigned)G) return;
  // the tile's last piece: lane 0's add read the count, its fence makes that an acquire, and
  // the warp's barrier orders the other lanes' reads of the pieces after it
  even_acquire();
  __syncwarp();
  const int ts = tile * G;
  const int q0 = even_warp_of(ts, base, R), q1 = even_warp_of(ts + G - 1, base, R);
  float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int q = q0; q <= q1; ++q) {
    const int qs = q * base + min(q, R);  // warp q's first unit (every run here has one)
    const float* p = slots + ((size_t)q * 2 + (qs >= ts ? 0 : 1)) * EVEN_SLOT;
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (m0 + 2 * t + r % 2 < M) sum[r] += even_load_piece(p + even_at(r, g, t));
  }
  even_store(sum, M, N, m0, tile * 16, g, t, y);
  if (lane == 0) counts[tile] = 0;  // every piece is in: 0 again for the next launch
}

// one scale group into acc: 13's (09's w4_group_offset), or 16's lean one (xs: its sums of x)
__device__ __forceinline__ void even_group(float (&acc)[1][4], uint4 qa, uint4 qb, float sa,
                                           float sb, int gi, int M, int K, int m0,
                                           const __nv_bfloat16* __restrict__ x, const float* xs)
{
#if EVEN_LEAN
  even_group_lean(acc[0], qa, qb, sa, sb, gi, M, K, m0, x, xs, gi);
#else
  (void)xs;
  w4_group_offset<1>(acc, qa, qb, sa, sb, gi, M, K, m0, x);
#endif
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_even_units(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
              const unsigned* __restrict__ Wt, const __nv_bfloat16* __restrict__ St,
              __nv_bfloat16* __restrict__ y, unsigned char* __restrict__ workspace)
{
  const uint4* wt = reinterpret_cast<const uint4*>(Wt);
  const unsigned* st = reinterpret_cast<const unsigned*>(St);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, G = K / 128;
  // The warp's run [run[0], run[1]), the cut (run[2] = base, run[3] = R) and the pass (run[4]):
  // in shared memory, read where used, so that the mma loop has the registers
  __shared__ int runs[WARPS][5];
  volatile int* run = runs[threadIdx.x / 32];
  if (lane == 0) {
    const int W = gridDim.x * WARPS, wid = blockIdx.x * WARPS + threadIdx.x / 32;
    const int U = (N + 15) / 16 * G, base = U / W, R = U % W;
    run[0] = wid * base + min(wid, R);
    run[1] = run[0] + base + (wid < R ? 1 : 0);
    run[2] = base;
    run[3] = R;
    run[4] = 0;
  }
  __syncwarp();
#if EVEN_LEAN
  DYNAMIC_SMEM_FLOATS(xs);  // -136 sum x, K / 128 groups x 8 batch rows
#else
  const float* xs = nullptr;
#endif
  while (run[4] * 8 < M) {  // 8 batch rows a pass
#if EVEN_LEAN
    __syncthreads();  // every warp of the block done with the last pass's sums
    even_x_sums<WARPS>(xs, M, K, 8 * run[4], x);
    __syncthreads();
#endif
    for (int u = run[0]; u < run[1];) {
      const int tile = u / G, gb = u - tile * G, ge = min(G, run[1] - tile * G);  // gb .. ge - 1
      const int m0 = 8 * run[4];  // read once a tile, not once a group (volatile)
      float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
      // a unit: 64 uint4 of Wt (rows n0 + g, then n0 + g + 8) and 8 words of St, as 13 reads
      const uint4* w = wt + (size_t)u * 64 + lane;
      const unsigned* s = st + (size_t)u * 8 + g;
#if PREFETCH
      // the piece's next unit loaded before this one is used: two groups in flight a warp
      uint4 qa = load_w(w), qb = load_w(w + 32);
      unsigned sc = *s;
      for (int gi = gb; gi < ge; ++gi) {
        w += 64;
        s += 8;
        uint4 na = qa, nb = qb;
        unsigned ns = sc;
        if (gi + 1 < ge) na = load_w(w), nb = load_w(w + 32), ns = *s;
        const float sa = __uint_as_float(sc << 16), sb = __uint_as_float(sc & 0xFFFF0000u);
        even_group(acc, qa, qb, sa, sb, gi, M, K, m0, x, xs);
        qa = na, qb = nb, sc = ns;
      }
#else
      for (int gi = gb; gi < ge; ++gi, w += 64, s += 8) {
        const uint4 qa = load_w(w), qb = load_w(w + 32);
        const unsigned sc = *s;  // the scales of rows n0 + g (low half) and n0 + g + 8
        const float sa = __uint_as_float(sc << 16), sb = __uint_as_float(sc & 0xFFFF0000u);
        even_group(acc, qa, qb, sa, sb, gi, M, K, m0, x, xs);
      }
#endif
      if (ge - gb == G) {
        even_store(acc[0], M, N, 8 * run[4], tile * 16, g, t, y);  // all of it: y directly
      } else {
        even_piece(acc[0], run[4], tile, ge - gb, u == run[0], run[2], run[3], M, N, K, y,
                   workspace);
      }
      u = tile * G + ge;
    }
    __syncwarp();  // every lane is past its last read of the pass
    if (lane == 0) run[4] = run[4] + 1;
    __syncwarp();
  }
}

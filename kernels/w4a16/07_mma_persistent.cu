// 07_mma_persistent: 04's tiles on a persistent grid, each warp's loads of W streaming through
// a DEPTH-deep register ring that runs on from one tile into the next.
//
// Changed from 04: 06 took 30 % of 04's integer instructions away and did not move the time
// (27.52 us at 1x28672x4096, both 56 % of the streaming read); its ncu showed the long-
// scoreboard stall up to 4.1 an issue and the math-pipe stall down: 04 waits on memory, not
// on its pipes. A block of 04 owns one 16-row tile: each warp loads its UNR = 4 scale groups
// of the tile, waits the whole DRAM latency, computes, loads its last 4, waits again, sums
// through shared memory and exits; 1792 blocks of 4 warps at N = 28672 are 3.4 waves of the
// 528 an H200 holds at once, and every block's bytes come in two bursts with nothing in
// flight between them. Here:
// - the grid is as few blocks as hold every tile at BLOCKS_SM blocks (16 warps) an SM, with
//   as many tiles each: per = ceil(tiles / (SM_COUNT * BLOCKS_SM)), grid = ceil(tiles / per)
//   (448 blocks of 4 tiles at N = 28672, 501 of 16 at 128256), so no block streams on alone
//   at the end; block b takes the tiles b, b + grid, ... and its WARPS warps split each
//   tile's scale groups as in 04 (warp w: groups w, w + WARPS, ...);
// - a warp's groups, over all of its block's tiles, are one stream: DEPTH groups (32 bytes
//   of W and two scales a lane each) are in flight at every step, the load cursor DEPTH
//   steps ahead of the use cursor and running on into the next tile, so the sum through
//   shared memory at a tile's end (one block barrier, the partials double-buffered) happens
//   while the next tile's bytes arrive;
// - nothing else changes at M <= 8: the dequantization (06's one LOP3 a nibble pair), mmas
//   and scales are w4mma.cuh's. Past 8 batch rows W is streamed once for every 16 (04: every
//   32), with 2 groups in flight: 4 batch tiles and 4 groups in flight spill at 128 registers.
// Each step of the stream is a scale group of the warp's or nothing: a tile's steps are
// rounded up to whole rounds of the DEPTH slots, so every tile starts at slot 0 and the ring
// is indexed by constants (registers, not local memory).
// Hypothesis: the bytes never stop: >= 80 % of the read ceiling at 1x28672x4096 and
// 1x128256x4096, >= 2.8x cuBLAS BF16 at 28672 x 4096.
// What ncu should show: dram__throughput well above 04's 46 %; the long-scoreboard stall
// down; launch__grid_size 448 at N = 28672.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(tiles, cdiv(tiles, SM_COUNT *
// BLOCKS_SM)), tiles = cdiv(N, 16)), block (32 * WARPS), static shared memory
// 2 * WARPS * 2 * 4 * 32 floats.
#define W4_FUSED_LOP3 1
#include "w4mma.cuh"
#include "w4tiles.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef DEPTH
#define DEPTH 4  // scale groups of W in flight a warp (32 bytes a lane each)
#endif
#ifndef BLOCKS_SM
#define BLOCKS_SM 4  // blocks an SM: 16 warps, at most 128 registers a thread
#endif

typedef W4Partials<WARPS> Partials2;

// y[m0 .. m0 + 8 * MT) of this block's tiles: MT n8 tiles of batch rows, DP groups in flight
template <int MT, int DP>
__device__ __forceinline__ void w4_persistent_rows(Partials2& part, int M, int N, int K, int m0,
                                                   const __nv_bfloat16* __restrict__ x,
                                                   const unsigned* __restrict__ Wq,
                                                   const __nv_bfloat16* __restrict__ S,
                                                   __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int groups = K / 128;
  // steps a tile, the same for every warp, rounded up to whole rounds of the DP slots (a
  // step past the warp's groups loads and computes nothing) so a tile starts at slot 0
  const int spt = ((groups + WARPS - 1) / WARPS + DP - 1) / DP * DP;
  const uint4 zero = make_uint4(0, 0, 0, 0);

  uint4 qa[DP], qb[DP];
  float sa[DP], sb[DP];
  // the load cursor: tile row ln0, step ls of it (group warp + ls * WARPS); it runs DP steps
  // ahead of the use and on past the stream's end, where it loads nothing (ln0 >= N)
  const int stride = 16 * (int)gridDim.x;
  int ln0 = 16 * (int)blockIdx.x, ls = 0;
  auto issue = [&](uint4& a, uint4& b, float& s_a, float& s_b) {
    const int gi = warp + ls * WARPS, ra = ln0 + g, rb = ra + 8;
    const bool in = gi < groups;
    // this lane's 16 bytes of group gi of rows ra and rb: uint4 number 4 gi + t of the row
    const uint4* wa = reinterpret_cast<const uint4*>(Wq + (size_t)ra * (K / 8)) + 4 * gi + t;
    a = in && ra < N ? __ldcs(wa) : zero;
    b = in && rb < N ? __ldcs(wa + (size_t)8 * (K / 32)) : zero;  // 8 rows on
    s_a = in && ra < N ? __bfloat162float(S[(size_t)ra * groups + gi]) : 0.0f;
    s_b = in && rb < N ? __bfloat162float(S[(size_t)rb * groups + gi]) : 0.0f;
    if (++ls == spt) ls = 0, ln0 += stride;
  };
#pragma unroll
  for (int d = 0; d < DP; ++d) issue(qa[d], qb[d], sa[d], sb[d]);

  // this block's tiles: rows n0 = 16 (blockIdx.x + ti gridDim.x) < N (no division: an
  // integer divide by gridDim.x would be an I2F and a MUFU.RCP)
  for (int n0 = 16 * (int)blockIdx.x, ti = 0; n0 < N; n0 += stride, ++ti) {
    float acc[MT][4];
#pragma unroll
    for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    for (int s0 = 0; s0 < spt; s0 += DP) {
#pragma unroll
      for (int d = 0; d < DP; ++d) {
        const int gi = warp + (s0 + d) * WARPS;
        if (gi < groups) w4_group_mma<MT>(acc, qa[d], qb[d], sa[d], sb[d], gi, M, K, m0, x);
        issue(qa[d], qb[d], sa[d], sb[d]);  // the slot's next group, DP steps on
      }
    }
    // the tile's sum over the warps, and y; one barrier a tile
    w4_tile_sum<WARPS, MT>(part, ti, acc, n0, m0, M, N, y);
  }
  __syncthreads();  // before another pass over W (M > 16) writes the partials again
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, BLOCKS_SM)
w4_mma_persistent(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                  const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
                  __nv_bfloat16* __restrict__ y)
{
  __shared__ Partials2 part;
  // past 8 batch rows, passes of 16 (two n8 tiles a pass: four would not fit 128 registers
  // with groups in flight), each with half the groups in flight, as each does twice the mmas
  if (M <= 8) w4_persistent_rows<1, DEPTH>(part, M, N, K, 0, x, Wq, S, y);
  else
    for (int m0 = 0; m0 < M; m0 += 16)
      w4_persistent_rows<2, (DEPTH + 1) / 2>(part, M, N, K, m0, x, Wq, S, y);
}

// 08_cp_async_ring: 06's tiles with W's bytes in flight in shared memory instead of registers:
// each warp streams its scale groups through a ring of RING slots filled by cp.async.
//
// Changed from 06: 04 and 06 hold a lane's groups in flight in registers, UNR = 4 of them
// (128 bytes a lane: qa and qb, 16 bytes each, a group), and 128 registers a thread cap an SM
// at 16 warps, so at most 64 KB of W an SM is on its way at any time. Their ncu: long-
// scoreboard stall 4.1 an issue, DRAM at 46 %. The BF16 decode step that reaches 94 % of the
// read on 128256 x 4096 (decode_gemm 06_mma, the same fragment layout) keeps 16 loads of 16
// bytes a lane in flight, twice as many. UNR = 8 here would spill at 128 registers. Here:
// - a lane's two 16-byte pieces of a group (rows g and g + 8 of the tile) are copied by
//   cp.async.cg (L2 only: W is read once) into the warp's ring slot, qa's of the 32 lanes
//   side by side and then qb's (1 KB a slot: the lane's LDS.128 reads 16 consecutive bytes per
//   lane, no bank conflict); a lane reads back only what it copied itself, so the ring needs
//   no barrier, only cp.async.wait_group;
// - RING - 1 groups are in flight a lane while it computes one: 7 at RING = 8, 224 bytes a
//   lane, held in shared memory (RING KB a warp): with 04's 16 warps an SM, 112 KB of W in
//   flight an SM, 1.75 times 04's 64 KB;
// - the group's two scales are loaded RING - 1 groups ahead too, into registers (the slots
//   are compile-time indices: the loop is unrolled by RING), 2 bytes each;
// - the dequantization, mmas and scaling are 06's (w4mma.cuh, one LOP3 a nibble pair).
// Hypothesis: at M = 1, >= 75 % of the read ceiling at 28672 x 4096 and 128256 x 4096, so
// >= 2.8x cuBLAS BF16 on both.
// What ncu should show: LDGSTS and LDS.128 instead of 06's LDG.E.128 for W; dram__throughput
// well above 06's 46 %; the long-scoreboard stall giving way to the wait on the copies'
// groups.
// Measured (H200, `kernelbook bench w4a16 06_lop3_dequant 08_cp_async_ring`, 30d6618, side
// by side): 1x128256x4096 95.3 us against 06's 98.7 (2846 against 2747 GB/s: +3.6 %, 2.58x
// cuBLAS BF16's 245.9 us beside it); 1x28672x4096 27.5 us against 27.3 (the same); 16x28672x4096
// 56.2 us against 52.9 (6 % slower: half the slots a lane past 8 batch rows). The hypothesis
// fails at 28672: 75 % more bytes in flight an SM bought nothing there, so 06's 46 % of DRAM
// is not a shortage of loads in flight; what is left to look at is the launch's ramp and
// tail (3.4 waves of 528 blocks, each a 32 KB burst) against a read of only 60 MB.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(N, 16)), block (32 * WARPS),
// dynamic shared memory WARPS * RING * 1024 bytes, static WARPS * 4 * 4 * 32 floats.
#define W4_FUSED_LOP3 1
#include "../common/cp_async.cuh"
#include "w4mma.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef RING
#define RING 8  // a warp's slots: RING - 1 scale groups in flight a lane
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 4  // blocks an SM: 16 warps, at most 128 registers a thread (5 would spill)
#endif

typedef float Partials[WARPS][4][4][32];  // each warp's accumulators, lane-major

// y[m0 .. m0 + 8 * MT) x [n0 .. n0 + 16) of this block: MT n8 tiles of batch rows, R slots
template <int MT, int R>
__device__ __forceinline__ void w4_ring_tile(Partials& part, uint4* ring, int M, int N, int K,
                                             int m0, int n0, const __nv_bfloat16* __restrict__ x,
                                             const unsigned* __restrict__ Wq,
                                             const __nv_bfloat16* __restrict__ S,
                                             __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int ra = n0 + g, rb = n0 + g + 8, groups = K / 128;
  // this lane's 16 bytes of group gi of rows ra and rb: uint4 number 4 gi + t of the row
  const uint4* wa = reinterpret_cast<const uint4*>(Wq + (size_t)(ra < N ? ra : 0) * (K / 8)) + t;
  const uint4* wb = reinterpret_cast<const uint4*>(Wq + (size_t)(rb < N ? rb : 0) * (K / 8)) + t;
  uint4* mine = ring + warp * RING * 64;  // this warp's slots: [RING][qa, qb][32 lanes]
  // the warp's groups: warp, warp + WARPS, ...: its i-th is group warp + i * WARPS
  const int cnt = groups > warp ? (groups - warp + WARPS - 1) / WARPS : 0;
  float sa[R], sb[R];
  // group i into slot i % R (and its scales), or, past the warp's groups, nothing; either
  // way one commit group, so that wait_copies<R - 1> after group i + R - 1's means group i
  auto issue = [&](int i, int slot) {
    const int gi = warp + i * WARPS;
    const bool in = i < cnt;
    copy16(mine + slot * 64 + lane, wa + 4 * gi, in && ra < N);
    copy16(mine + slot * 64 + 32 + lane, wb + 4 * gi, in && rb < N);
    commit_copies();
    sa[slot] = in && ra < N ? __bfloat162float(S[(size_t)ra * groups + gi]) : 0.0f;
    sb[slot] = in && rb < N ? __bfloat162float(S[(size_t)rb * groups + gi]) : 0.0f;
  };
  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
  for (int d = 0; d < R - 1; ++d) issue(d, d);
  for (int i0 = 0; i0 < cnt; i0 += R) {
#pragma unroll
    for (int d = 0; d < R; ++d) {
      const int i = i0 + d;
      if (i >= cnt) break;  // the same for the whole warp
      // the slot computed last (d - 1) is refilled R - 1 groups ahead
      issue(i + R - 1, (d + R - 1) % R);
      wait_copies<R - 1>();  // this lane's copies of group i have landed
      const uint4 qa = mine[d * 64 + lane], qb = mine[d * 64 + 32 + lane];
      w4_group_mma<MT>(acc, qa, qb, sa[d], sb[d], warp + i * WARPS, M, K, m0, x);
    }
  }
  // what is left in flight is zero-fills past the warp's groups: landed before another pass
  // over W (M > 16) copies into the same slots (each lane's own)
  wait_copies<0>();
  sum_warps_store<WARPS, MT>(part, acc, M, N, m0, n0, y);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_cp_async_ring(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                 const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
                 __nv_bfloat16* __restrict__ y)
{
  __shared__ Partials part;
  DYNAMIC_SMEM_U4(ring);
  const int n0 = blockIdx.x * 16;
  if (n0 >= N) return;  // the whole block
  // past 8 batch rows, passes of 16 (two n8 tiles), each group doing twice the mmas with half
  // the slots in flight (four tiles a pass, beside the one-tile pass, spill at 128 registers)
  if (M <= 8) w4_ring_tile<1, RING>(part, ring, M, N, K, 0, n0, x, Wq, S, y);
  else
    for (int m0 = 0; m0 < M; m0 += 16)
      w4_ring_tile<2, RING / 2>(part, ring, M, N, K, m0, n0, x, Wq, S, y);
}

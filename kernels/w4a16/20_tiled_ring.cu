// 20_tiled_ring: 18 with each warp's scale groups landing in a ring of STAGES slots of its own
// in shared memory (cp.async), so that STAGES - 1 groups of W and their scales are on their
// way from DRAM while the warp multiplies one, with no register holding them.
//
// Changed from 18: how a group reaches the warp, and 16 batch rows a pass (18: 8, so W was read
// twice at M = 16; each group's A fragments are made once for both n8 tiles of x); nothing of
// the grid, the walk or the group's arithmetic. A lane copies its own 2 x 16 bytes of the
// group (cp.async.cg, L2 only) and its own 4 bytes of the group's scales (cp.async.ca: 4 bytes
// must go through L1) into its slot, and reads back only what it copied, so the wait on its
// own copies is the only ordering there is (no barrier, no mbarrier). The warps' accumulators
// are added through the rings' memory once every warp of the block is past its walk (a block
// barrier first).
// Why: 18's ncu at 1 x 28672 x 4096 (cbb1177) has the warps waiting on W (long scoreboard 7.9
// warps an issue) at DRAM 59.9 % of peak: a warp holds one 1 KB group in flight, 32 KB an SM,
// and a second in registers costs warps an SM (13's UNR 2, 16's PREFETCH). 08's ring bought
// nothing, but 08 was bound by its instructions (06's group); 10's and 11's lost to their
// copy addressing, unrolled code and registers (persistent grids, chunks of groups shared by
// the block). Here a slot is a lane's own, its address a lane offset and a slot index.
// Hypothesis: DRAM kept busy through a warp's walk, and the SMs through the launch's second,
// partial wave (1792 blocks for 1056 places at 32 warps an SM), by STAGES - 1 groups in
// flight a warp: below 18.0 us at 1 x 28672 x 4096 (3x cuBLAS BF16 at its 53.98 us in the run
// at cbb1177).
// At M = 16, one pass where 18 takes two: about 13's 43.3 us at 16 x 28672 x 4096 or less, where
// 18 took 75.0 (cbb1177).
// What ncu should show: the long-scoreboard stall below 18's 7.9 (waits on the copies show as
// "long scoreboard" too, at DEPBAR), DRAM throughput above 59.9 % of peak, instructions a
// group up by the copies' few (LDGSTS and LDS for LDG).
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(N, 16)), block (32 * WARPS),
// WARPS * (STAGES * 1152 + cdiv(K / 128, WARPS) * 32 * cdiv(min(M, 16), 8)) bytes of dynamic
// shared memory.
#include "../common/cp_async.cuh"
#include "w4even.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (32 / WARPS)
#endif
#ifndef STAGES
#define STAGES 3  // a warp's slots: STAGES - 1 groups in flight while it multiplies one
#endif
static_assert(STAGES >= 2, "a slot to multiply from and one to fill");

typedef float RingPartials[WARPS][4][4][32];  // sum_warps_store's, laid over the rings at the end
static_assert(sizeof(RingPartials) <= WARPS * STAGES * 1024, "the partials fit in the rings");

// 4 bytes global -> shared (cp.async.ca: the only kind that copies fewer than 16)
__device__ __forceinline__ void ring_copy4(void* dst, const void* src)
{
#ifdef KERNELBOOK_EMU
  std::memcpy(dst, src, 4);
#else
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src));
#endif
}

// the lane's 32 bytes of a group and its 4 bytes of the group's scales into slot (ws, ss)
__device__ __forceinline__ void ring_fill(uint4* ws, unsigned* ss, const uint4* w,
                                          const unsigned* s)
{
  copy16(ws, w, true);
  copy16(ws + 32, w + 32, true);
  ring_copy4(ss, s);
}

// one pass of 20's walk: batch rows m0 .. m0 + 8 MT of the block's tile
template <int MT>
__device__ __forceinline__ void ring_pass(uint4* smem, int M, int N, int K, int m0,
                                          const __nv_bfloat16* __restrict__ x,
                                          const unsigned* __restrict__ Wt,
                                          const __nv_bfloat16* __restrict__ St,
                                          __nv_bfloat16* __restrict__ y)
{
  const int lane = even_tid() % 32, warp = even_tid() / 32, G = K / 128;
  const int n = warp < G ? (G - warp + WARPS - 1) / WARPS : 0;  // groups warp, warp + WARPS, ..
  const int most = (G + WARPS - 1) / WARPS;                      // warp 0's n
  uint4* const rw = smem + warp * STAGES * 64 + lane;  // slot s: rw[64 s], rw[64 s + 32]
  unsigned* const rs =
      reinterpret_cast<unsigned*>(smem + WARPS * STAGES * 64) + warp * STAGES * 32 + lane;
  // -136 sum x: 8 n floats for each 8 batch rows (the launch's smem has room for 16 when M > 8)
  float* const z = reinterpret_cast<float*>(smem + WARPS * STAGES * 72) + warp * 8 * most * MT;
  // the warp's first group, an index into Wt's 16-byte pieces (32 bits: held through the walk
  // in one register, not two; Wt is under 32 GB)
  const int u = (blockIdx.x * G + warp) * 64 + lane;
  const uint4* const w = reinterpret_cast<const uint4*>(Wt);
  const unsigned* const sp = reinterpret_cast<const unsigned*>(St) + lane / 4;  // + 8 a group
#pragma unroll
  for (int s = 0; s + 1 < STAGES; ++s) {  // the first STAGES - 1 groups, before x's sums
    const int f = u + 64 * WARPS * s;
    if (s < n) ring_fill(rw + 64 * s, rs + 32 * s, w + f, sp + f / 64 * 8);
    commit_copies();
  }
#pragma unroll
  for (int j = 0; j < MT; ++j) even_warp_x_sums(z + 8 * n * j, M, K, m0 + 8 * j, warp, n, WARPS, x);
  float acc[MT][4] = {};
  int rd = 0, wr = STAGES - 1;  // the slot multiplied from, the slot filled
  for (int k = 0; k < n; ++k) {
    if (k + STAGES - 1 < n) {  // group k + STAGES - 1 into the slot group k - 1 left
      const int f = u + 64 * WARPS * (k + STAGES - 1);
      ring_fill(rw + 64 * wr, rs + 32 * wr, w + f, sp + f / 64 * 8);
    }
    commit_copies();  // (empty past the warp's last group: the count of groups stays even)
    wait_copies<STAGES - 1>();  // group k's copies have landed
    const uint4 qa = rw[64 * rd], qb = rw[64 * rd + 32];
    const unsigned sc = rs[32 * rd];
    even_group_rows<MT>(acc, qa, qb, __uint_as_float(sc << 16), __uint_as_float(sc & 0xFFFF0000u),
                        warp + k * WARPS, M, K, m0, x, z, 8 * n, k);
    rd = rd + 1 == STAGES ? 0 : rd + 1;
    wr = wr + 1 == STAGES ? 0 : wr + 1;
  }
  __syncthreads();  // every warp past its walk: the partials go where the rings were
  // (the tile's first row read again here, so that y's addresses are not made before the walk
  // and held through it: 64 registers)
  sum_warps_store<WARPS, MT>(*reinterpret_cast<RingPartials*>(smem), acc, M, N, m0,
                             even_tid<true>() * 16, y);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_tiled_ring(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
              const unsigned* __restrict__ Wt, const __nv_bfloat16* __restrict__ St,
              __nv_bfloat16* __restrict__ y)
{
  DYNAMIC_SMEM_U4(smem);  // the warps' W slots, their scale slots, their -136 sum x
  for (int m0 = 0; m0 < M; m0 += 16)  // 16 batch rows a pass, each group's A fragments used twice
    if (M - m0 > 8)
      ring_pass<2>(smem, M, N, K, m0, x, Wt, St, y);
    else
      ring_pass<1>(smem, M, N, K, m0, x, Wt, St, y);
}

// 09_row_run: 08's loads, each warp streaming a run of ROWS adjacent rows of W as one
// contiguous range, its loads running DEPTH steps ahead across the ends of rows.
//
// Changed from 08: 08 is at 91.8 % of the read ceiling at 1 x 14336 x 4096 but 90.2 % at
// 1 x 28672 x 4096, where cuBLAS (56.0-59.5 us across the jobs of a run) sometimes beats it.
// 08's warp reads one 8 KB row in two rounds of 8 loads a lane: it issues 4 KB, waits a DRAM
// latency, issues 4 KB more, waits again, reduces and exits; between the rounds and between
// a warp's end and the next block's start, its share of the bytes is not in flight. 07 kept
// them in flight on a persistent grid, but with rows strided over the warps, per-step cursor
// arithmetic, and W through L1 (x evicted): it lost to 02. Here:
// - a warp owns ROWS adjacent rows, ROWS * K * 2 contiguous bytes of W: its loads are one
//   pointer walking 512 bytes a step, the next row's first steps issued while this row's
//   last ones are summed, so the only gap a warp has is its start;
// - DEPTH 16-byte loads of W in flight a lane (DEPTH / 2 KB a warp), issued DEPTH steps
//   ahead of their use; a row's K / 256 steps are a whole number of DEPTH-step groups, so
//   the loop body is DEPTH unrolled steps with no per-step branch;
// - W by ld.global.nc.L1::no_allocate and x through L1, as in 08;
// - the grid stays non-persistent (cdiv(N, WARPS * ROWS) blocks), so the last wave's
//   imbalance is one block's run of rows, not a persistent warp's whole share.
// The run's length trades the gaps (one a run) against the tail (the last blocks' runs):
// ROWS and WARPS are tuned at 1 x 14336 x 4096 and 1 x 28672 x 4096. DEPTH 16 (8 KB a warp)
// takes 168 registers a lane, 12 warps an SM, and lost at every size when scouted.
// Hypothesis: >= 93 % of the read ceiling at the M = 1 sizes of 14336 rows and up, so past
// cuBLAS's best at 1 x 28672 x 4096.
// What ncu should show: dram__throughput above 08's; long scoreboard still the largest stall
// but fewer warps needed for it (more bytes in flight each).
//
// Sizes: any M, N, K. K % 256 == 0 with K / 256 a multiple of DEPTH streams; any other K % 8
// == 0 walks each row as 08's remainder loop does (a 16-byte step a lane at a time), and
// K % 8 != 0 a scalar walk. At M > 1 each batch row streams the run again (from L2 when it
// fits): the M = 1 step. Launch: grid (cdiv(N, WARPS * ROWS)), block (32 * WARPS), no
// shared memory.
#include "decode.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef ROWS
#define ROWS 4  // adjacent rows a warp
#endif
#ifndef DEPTH
#define DEPTH 8  // 16-byte steps of W in flight a lane (even: two accumulators)
#endif
static_assert(DEPTH % 2 == 0, "steps alternate between the two accumulators");

// 16 bytes of x through L1, in program order with W's loads (volatile): the compiler would
// otherwise hoist a whole row of x into registers, and the registers cost occupancy
__device__ __forceinline__ uint4 load_x(const uint4* p)
{
#ifdef KERNELBOOK_EMU
  return *p;
#else
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#endif
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
decode_row_run(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
               const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32;
  const int r0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  if (r0 >= N) return;  // the whole warp
  const int rows = min(ROWS, N - r0);
  const int c8 = K / 8, steps = c8 / 32;  // 16-byte pieces a row; whole warp steps a row
  if (K % 256 != 0 || steps % DEPTH != 0) {  // each row on its own, a step at a time
    rows_one_at_a_time(M, N, K, r0, r0 + rows, x, W, y);
    return;
  }
  // the run: steps * rows warp steps of 512 contiguous bytes, lane's piece at + lane
  const uint4* run = reinterpret_cast<const uint4*>(W + (size_t)r0 * K) + lane;
  const int total = steps * rows;
  for (int m = 0; m < M; ++m) {
    const uint4* x4 = reinterpret_cast<const uint4*>(x + (size_t)m * K) + lane;
    uint4 q[DEPTH];
#pragma unroll
    for (int s = 0; s < DEPTH; ++s) q[s] = load_w(run + 32 * s);  // steps >= DEPTH
    int next = DEPTH;  // the run's next step to load
    for (int r = 0; r < rows; ++r) {
      float acc0 = 0.0f, acc1 = 0.0f;
      for (int g = 0; g < steps; g += DEPTH, next += DEPTH) {
        // past the run's end the group reloads the run's last DEPTH steps (from L2, unused):
        // no predicate a step, so the slots stay in place (no copies between registers)
        const uint4* ahead = run + 32 * min(next, total - DEPTH);
#pragma unroll
        for (int s = 0; s < DEPTH; s += 2) {
          acc0 = dot8(q[s], load_x(x4 + 32 * (g + s)), acc0);
          q[s] = load_w(ahead + 32 * s);
          acc1 = dot8(q[s + 1], load_x(x4 + 32 * (g + s + 1)), acc1);
          q[s + 1] = load_w(ahead + 32 * (s + 1));
        }
      }
      const float acc = warp_sum(acc0 + acc1);  // the next row's loads are in flight
      if (lane == 0) y[(size_t)m * N + r0 + r] = __float2bfloat16_rn(acc);
    }
  }
}

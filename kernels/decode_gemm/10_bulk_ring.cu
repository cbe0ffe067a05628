// 10_bulk_ring: W streamed by the TMA unit (cp.async.bulk) into a ring of 4 KB shared-memory
// slots a warp, on a persistent grid, ~190 KB in flight an SM.
//
// Changed from 09: 08 and 09 hold what they have in flight in registers. 09's best run keeps
// 4 KB a warp at 96 registers, 20 warps an SM, 80 KB; 08 has 40 warps of 4 KB but each waits
// twice a row with nothing in flight. Both stop near 92 % of the streaming read at
// 1 x 28672 x 4096, where cuBLAS varies from 56.0 to 59.5 us across a run's jobs. ncu names
// cuBLAS's kernel there: nvjet_sm90_tst_128x8_64x12, one 384-thread block an SM, 12 stages
// of a 128 x 64 tile (16 KB), 226 KB of shared memory: ~190 KB in flight an SM, by the TMA,
// costing no registers. Here:
// - each warp streams its rows as one contiguous range of W, 4 KB a slot: lane 0 issues a
//   bulk copy a slot (cp.async.bulk, completing on the slot's mbarrier), SLOTS of them ahead;
// - the lanes read a landed slot with LDS.128 (16 bytes a lane, conflict-free), take x's
//   matching pieces through L1 (bulk copies bypass L1, so nothing evicts x), and free the
//   slot for the copy SLOTS ahead once every lane has its pieces (__syncwarp);
// - the grid is SM_COUNT * BLOCKS_SM blocks and the rows are split evenly over all its warps
//   (N / warps each, within one), so no block starts late and the ring never restarts;
// - WARPS * SLOTS * BLOCKS_SM * 4 KB in flight an SM, tuned from 96 to 192 KB. Scouted with
//   4 and 6 slots too (59.7-62.2 us at 1 x 28672 x 4096, against 59.2 for 3): at the same
//   bytes an SM, fewer and deeper rings were slower, so the space keeps 3 slots.
// Hypothesis: the bytes in flight of cuBLAS's kernel, at the instruction cost of 08's:
// >= 94 % of the streaming read at 1 x 28672 x 4096 and past cuBLAS at every M = 1 size of
// 14336 rows and up.
// What ncu should show: dram__throughput at or above cuBLAS's 84.8 % (1 x 28672 x 4096);
// no L1 traffic for W (lts__t_bytes close to dram__bytes_read); the stall "long scoreboard"
// replaced by the mbarrier wait.
//
// Sizes: any M, N, K. K % 2048 == 0 (a row is whole slots) streams; any other K % 8 == 0
// walks each row as 08's remainder loop does (a 16-byte step a lane at a time), and K % 8
// != 0 a scalar walk. At M > 1 each batch row streams the warp's rows again: the M = 1 step.
// Launch: grid (SM_COUNT * BLOCKS_SM), block (32 * WARPS), WARPS * SLOTS * (4096 + 8) bytes
// of dynamic shared memory.
#include "../common/bulk.cuh"
#include "decode.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef SLOTS
#define SLOTS 3  // 4 KB slots a warp
#endif
#define PIECES 8  // 16-byte pieces a lane a slot
#define SLOT_BYTES (32 * PIECES * 16)

#ifdef KERNELBOOK_EMU
#define SMEM emu_dynamic_smem
#endif

extern "C" __global__ void __launch_bounds__(32 * WARPS)
decode_bulk_ring(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                 const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y)
{
#ifndef KERNELBOOK_EMU
  extern __shared__ __align__(16) unsigned char SMEM[];
#endif
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  // this warp's rows: an even split of N over every warp of the grid
  const long long tw = (long long)gridDim.x * WARPS, gw = (long long)blockIdx.x * WARPS + wid;
  const int r0 = (int)(gw * N / tw), r1 = (int)((gw + 1) * N / tw);
  if (r0 >= r1) return;  // the whole warp (more warps than rows)
  if (K % (SLOT_BYTES / 2) != 0) {  // rows not whole slots: each row on its own, as 08's tail
    rows_one_at_a_time(M, N, K, r0, r1, x, W, y);
    return;
  }
  // the warp's ring: SLOTS slots of SLOT_BYTES, then the block's mbarriers (one a slot)
  const uint4* ring = reinterpret_cast<const uint4*>(SMEM) + wid * SLOTS * (SLOT_BYTES / 16);
  uint64_t* bars =
      reinterpret_cast<uint64_t*>(SMEM + WARPS * SLOTS * SLOT_BYTES) + wid * SLOTS;
  const int per_row = K / (SLOT_BYTES / 2);  // slots a row
  const int per_pass = (r1 - r0) * per_row;  // slots a batch row's pass over the warp's rows
  const int total = per_pass * M;  // < 2^31: 8 TB of W reads
  const char* run = reinterpret_cast<const char*>(W + (size_t)r0 * K);
  // slot t of the stream holds bytes (t % per_pass) * SLOT_BYTES of the run
  auto issue = [&](int t) {
    uint64_t* bar = &bars[t % SLOTS];
    mbar_arrive_expect_tx(bar, SLOT_BYTES);
    bulk_copy((void*)(ring + (t % SLOTS) * (SLOT_BYTES / 16)),
              run + (size_t)(t % per_pass) * SLOT_BYTES, SLOT_BYTES, bar);
  };
  if (lane == 0) {
    for (int s = 0; s < SLOTS; ++s) mbar_init(&bars[s], 1);  // lane 0's arrival, and the bytes
    mbar_init_fence();
    for (int s = 0; s < SLOTS && s < total; ++s) issue(s);
  }
  __syncwarp();
  int t = 0;
  for (int m = 0; m < M; ++m) {
    const uint4* x4 = reinterpret_cast<const uint4*>(x + (size_t)m * K) + lane;
    for (int r = r0; r < r1; ++r) {
      float acc0 = 0.0f, acc1 = 0.0f;
      for (int j = 0; j < per_row; ++j, ++t) {
        const int slot = t % SLOTS;
        mbar_wait(&bars[slot], (uint32_t)(t / SLOTS) & 1u);
        const uint4* sw = ring + slot * (SLOT_BYTES / 16) + lane;
        const uint4* sx = x4 + j * (SLOT_BYTES / 16);
        uint4 w[PIECES];
#pragma unroll
        for (int p = 0; p < PIECES; ++p) w[p] = sw[32 * p];
        __syncwarp();  // every lane has its pieces: the slot may be written again
        if (lane == 0 && t + SLOTS < total) issue(t + SLOTS);
#pragma unroll
        for (int p = 0; p < PIECES; p += 2) {
          acc0 = dot8(w[p], __ldg(sx + 32 * p), acc0);
          acc1 = dot8(w[p + 1], __ldg(sx + 32 * (p + 1)), acc1);
        }
      }
      const float acc = warp_sum(acc0 + acc1);
      if (lane == 0) y[(size_t)m * N + r] = __float2bfloat16_rn(acc);
    }
  }
}

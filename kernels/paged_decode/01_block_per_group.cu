// 01_block_per_group: one block per (sequence, KV head), its 4 query heads sharing every load
// of K and V, one online softmax over the whole sequence.
//
// Grid (HKV, B), 4 warps. Each warp takes every 4th token of the sequence: looks the token's
// page up in the block table, loads its key and value for this KV head (256 bytes each: 8 a
// lane, the 4 dims the lane owns, ld.global.cs as they are read once), scores it against the
// group's 4 queries (4 FMAs a lane and a 5-shuffle sum per head) and folds it into each head's
// running max, sum and weighted value sum. The 4 warps' results merge through shared memory
// (warp g merges head g), and o = acc / l.
// Why: GQA's 4 query heads read each KV byte once; pages cost one table lookup a token.
// Hypothesis: latency-bound. A warp has one token's 512 bytes in flight and 20 shuffles of
// work on it, and a block has 4 warps: at batch 64 the 512 blocks fill the machine but keep
// ~4 KB in flight an SM, far under what HBM needs (~40 KB an SM at 4 TB/s and ~1.3 us). At
// batch 1 only 8 blocks run: 8 of 132 SMs. Expect ~30 % of the read ceiling at batch 64 and
// KV 16k, and single digits at batch 1; split-KV (02) is for that.
// What ncu should show: long-scoreboard stalls the largest; dram__throughput low; at batch 1
// sm__warps_active tiny.
//
// Sizes: any B, L (the lengths vary; every length >= 1). Launch: grid (8, B), block 128.
#include "paged.cuh"

extern "C" __global__ void __launch_bounds__(32 * WARPS)
paged_block_per_group(int B, int L, int max_pages, const int* __restrict__ lens,
                      const int* __restrict__ table, const __nv_bfloat16* __restrict__ q,
                      const __nv_bfloat16* __restrict__ kc, const __nv_bfloat16* __restrict__ vc,
                      __nv_bfloat16* __restrict__ o)
{
  const int kvh = blockIdx.x, b = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float qf[G][4];
  load_queries(qf, b, kvh, lane, q);
  Part pt[G];
  init_parts(pt);
  attend_range(pt, qf, b, kvh, 0, lens[b], max_pages, warp, lane, table, kc, vc);
  const Part r = merge_warps(pt, warp, lane);
  store_o(o, b, kvh * G + warp, lane, r);
}

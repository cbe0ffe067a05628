// 02_split_kv: 01 with each sequence's tokens split over S blocks (flash-decoding), two tokens
// a warp in flight, and a second kernel that merges the S partial results.
//
// Changed from 01: the grid gains a third dimension of S splits; block z of (sequence b, KV
// head) takes tokens [z * chunk, (z + 1) * chunk) of b (chunk = L / S rounded up to whole
// pages; a block past b's length contributes an empty result), each warp loads UNROLL = 2
// tokens before using either, and the block's merged (m, l, acc) per query head goes to the
// workspace unnormalized. A combine kernel (a block per (sequence, query head), a thread per
// dim) merges the S results by their maxima and writes o = acc / l. S is picked from the grid
// expression: enough blocks for ~2 a SM at any batch (S = 32 at batch 1, 1 at batch 64), never
// past MAX_SPLIT or chunks under 512 tokens.
// Hypothesis: 01 at batch 1 ran 8 blocks; S = 32 runs 256 and each has twice the bytes in
// flight a warp, so the read ceiling is reachable at small batch too. Expect >= 60 % of it at
// batch 1 and KV 64k, and at batch 64 / KV 16k 01's speed times the in-flight gain (~1.5x).
// What ncu should show: sm__warps_active high at batch 1; dram__throughput rising with S;
// the combine kernel a few us at most.
//
// Sizes: any B, L. Launch: grid (8, B, S), block 128; then the combine, grid (B * 32),
// block 128. Workspace: 256 bytes (S) + MAX_SPLIT * B * 32 records of D + 2 floats.
#ifndef UNROLL
#define UNROLL 2
#endif
#define PAGED_SPLIT  // the workspace records and the combine kernel (paged.cuh)
#include "paged.cuh"

extern "C" __global__ void __launch_bounds__(32 * WARPS)
paged_split_kv(int B, int L, int max_pages, const int* __restrict__ lens,
               const int* __restrict__ table, const __nv_bfloat16* __restrict__ q,
               const __nv_bfloat16* __restrict__ kc, const __nv_bfloat16* __restrict__ vc,
               __nv_bfloat16* __restrict__ o, float* __restrict__ ws)
{
  const int kvh = blockIdx.x, b = blockIdx.y, z = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int t0, t1;
  split_range(L, lens, ws, t0, t1);
  float qf[G][4];
  load_queries(qf, b, kvh, lane, q);
  Part pt[G];
  init_parts(pt);
  if (t0 < t1) attend_range(pt, qf, b, kvh, t0, t1, max_pages, warp, lane, table, kc, vc);
  const Part r = merge_warps(pt, warp, lane);
  store_record(ws, b, kvh * G + warp, z, lane, r);
}

// 17_async_b_wide: 16's loop with twice the work a thread (128 accumulators) at half the warps
// an SM (8), where 16 keeps 64 accumulators and 16 warps.
//
// Changed from 16: the tune space only. The warp tile is twice 16's area (WM x WN / 32 = 128
// results a lane: an 8x16 or 16x8 patch), the block 4 or 8 such warps, and __launch_bounds__
// asks for 8 warps an SM (MIN_BLOCKS = 256 / NUM_THREADS), which lets ptxas use up to 255
// registers: 205-247 for these shapes (ptxas 13.0), no spills.
// Why it should help: 16 at 4096^3 (published at 567eb07/c2337cc: 96.0 % of cuBLAS) issues in
// 87 % of its active cycles and its hot loop is 86.8 % FFMA (1180 instructions for 1024 FFMA:
// 64 LDS.128 of fragments, the A stores, copies, addresses), so at best about 87 % of the
// issue slots carry an FFMA. A 128-result patch reads 6 float4 fragments a k-step for 128
// FFMA where 16's 64-result one reads 4 for 64 (21 FFMA a fragment load instead of 16), and
// the per-tile work (A's loads and transposed stores, B's copies, address arithmetic, the
// barrier) is spread over twice the FFMAs: the hot loops here are 89.3-91.7 % FFMA
// (`kernelbook loops`). Before 16, 128-result patches lost to 64-result ones (10's first
// space: 5-40 % behind), because with 8 warps an SM nothing overlapped 10's load of the
// next tile between its two barriers; 16 takes that load off the critical path (B by
// cp.async, A's LDGs issued before the FFMAs), so the occupancy that 10 needed for it
// should matter less, and the 8 warps keep 128 independent FFMA chains each, enough ILP
// for the FMA pipe.
// Hypothesis: >= 99 % of cuBLAS at 4096^3, past 16.
// The risk: 2 warps a scheduler instead of 4, so a warp's shared-load and barrier waits have
// one other warp to hide behind, not three: short-scoreboard and barrier stalls may rise
// by more than the instruction mix gains. The tune space (BK 8 or 16, 128x128 blocks of 4
// warps or 128x256 / 256x128 of 8, the patch's orientation, the GROUP_M raster) measures it.
// What ncu should show: FFMA share of the instructions issued up (87 -> ~90 %), 8 warps an
// SM (sm__warps_active), registers 205-247, smsp__issue_active per active cycle at or above
// 16's 0.87, the FMA pipe over 16's 73 %.
//
// Sizes: as 10 (any M, N, K remainder; K % 4 == 0 and N % 4 == 0). Launch: as 10.
#define ASYNC_B 1
#include "10_warptiling.cu"

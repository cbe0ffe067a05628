// 16_async_b: 10's warp tiling with the next tile's loads in flight while the current one
// computes, at no register cost for B: B by cp.async into a second shared stage, A through
// registers, and one barrier a tile instead of two.
//
// Changed from 10: 10's loop (PREFETCH 0) computes tile t, then, between two barriers, loads
// tile t+1 (LDG.128 into registers) and stores it (STS): every warp of the block waits out
// the global load's latency at the second barrier, with nothing of its own to issue. In the
// profile of 10's best (18d7765, 4096^3) those are the long-scoreboard (0.36 warps an issue)
// and barrier (0.28) stalls, beside short-scoreboard 0.47; issue slots 82 % busy. 10's
// PREFETCH 1 overlaps them by holding all of tile t+1 in registers through the compute, and
// loses more to the registers than it gains (10's header: held to 128, ptxas spills). Here:
// - B's 16-byte rows go global -> shared by cp.async (LDGSTS), issued before tile t computes,
//   into the stage tile t does not use: no registers, no STS;
// - A still goes through registers (it is stored transposed, which 16-byte copies cannot
//   do), its LDG.128s issued before the compute and stored after it: its 2 float4 a thread
//   (the 128x128 tile, 8 warps) are the only registers held through the compute, where 10's
//   PREFETCH 1 holds A's and B's;
// - one barrier a tile: after the stores and this thread's copies (cp.async.wait_group 0),
//   tile t+1 is whole, and every warp has finished reading tile t's stage, the next one
//   written.
// The loop is 10's (10_warptiling.cu built with ASYNC_B: FFMA order, fragments, the FULL
// copy without bounds checks, the raster); the tile shapes are tuned over 10's plateau.
// Hypothesis: the load latency and the second barrier go under the FFMAs: long-scoreboard
// and barrier stalls down, issue slots over 85 % busy, and >= 95 % of cuBLAS at 4096^3
// (10's best, published at 18d7765: 91.7 %).
// The cost: left to itself ptxas gives these loops 140-155 registers (B's copy addresses and
// A's float4s live through the compute), which would halve the blocks an SM; __launch_bounds__
// holds them to 128 (MIN_BLOCKS = 512 / NUM_THREADS: 16 warps an SM, as 10's best), met
// without spills (one shape spills and is left out of the space) at ~1180-1190 instructions
// an iteration against 10's ~1120-1135 for the same 1024 FFMAs: addresses recomputed.
// What ncu should show: LDGSTS.E.BYPASS.128 and one BAR.SYNC in the hot loop (the page's
// SASS line), smsp__average_warps_issue_stalled_long_scoreboard and _barrier well under 10's,
// 16 warps an SM, static shared memory doubled (32 KiB a block at 128x128).
//
// Sizes: as 10 (any M, N, K remainder; K % 4 == 0 and N % 4 == 0). Launch: as 10.
#define ASYNC_B 1
#include "10_warptiling.cu"

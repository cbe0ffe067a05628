// 16_even_lean: 15's walk with a group of half the instructions: 15's source built with
// EVEN_LEAN (even_group_lean), in the tiled_pairs layout.
//
// Changed from 15: the scale group's arithmetic, nothing of the walk. 13's group, which 15
// keeps, is 146 SASS instructions a warp in the hot loop (13's published loop table): 16
// HMMAs (8 of them the zero point's, -136 times x against a constant A), 16 PRMTs pairing
// x's elements to the nibble order, 8 CS2Rs zeroing two mma chains, the loads of x predicated
// on the batch row. 13's profile at 1 x 28672 x 4096 (measured at 2ea551c): the ALU pipe 58 %
// busy of the active cycles, issue slots 44 % busy, 5.1 warps on the long scoreboard an issue;
// with 32 warps an SM sharing the issue slots, the time a warp spends between two loads of W
// is part of every group's round trip, since it keeps one group (two with PREFETCH) in flight.
// Here, as 14 computes a group (14 lost on its ring, not on this): the weights in the
// tiled_pairs layout (nibbles s and s + 4 are weights 2s and 2s + 1), so that x's words are
// the B fragment as they lie (no PRMT); the zero point as -136 sum x, summed once a pass by
// the block into shared memory (K / 128 x 8 floats) and added to the C fragment before the
// scale (no mma, no second chain); x's loads unpredicated, a lane past M reading row M - 1
// (its C columns are never stored).
// Hypothesis: 103 SASS instructions a group in the hot loop, not 15's 142 (kernelbook.build.loops
// on both cubins, WARPS 4, MIN_BLOCKS 8): each warp's turn between its loads of W shorter, more
// of the time with loads in flight: ~10 % off 15 at 1 x 28672 x 4096.
// What ncu should show: inst_executed about half of 15's, the ALU pipe below 30 %, DRAM
// throughput up by as much as the time goes down.
// Measured (H200, the study's run at 1917446): 4 % off 15, as predicted in direction, but 15
// lost to 13 (see 15): 22.78 us at 1 x 28672 x 4096 (13: 20.70), 75.04 at 1 x 128256 x 4096,
// the first step past 3x cuBLAS BF16 there (317 %). Its small-block candidates are the slowest
// (WARPS 2: 29.9 to 30.9 us), the launches where the most blocks each sum all of x before their
// first load of W.
//
// Sizes, launch: 15's, with K / 128 x 32 bytes of dynamic shared memory.
#define EVEN_LEAN 1
#include "15_even_units.cu"

// 12_l2_prefetch: 09 with each block asking L2, in one instruction, for the whole tile that a
// block of a later wave will read.
//
// Changed from 09: 09 waits on W (long-scoreboard 4.45 warps an issue, DRAM 49 % of peak at
// 1 x 28672 x 4096) with issue slots only 37.6 % busy. Its reads in flight are what its
// registers hold: UNR = 2 groups of 2 x 16 bytes a lane, 2 KB a warp, ~40 KB an SM at 5
// blocks of 4 warps, and less at a block's start and end, since a block lives for only 8
// groups a warp (its 16 rows x 2 KB of W). 10 and 11 moved the same reads into shared memory
// through cp.async and lost to 09 (more instructions, fewer warps). Here nothing in the
// loop changes (09's source, built with W4_L2_PREFETCH); before it, one thread of block b
// issues cp.async.bulk.prefetch.L2 for tile b + AHEAD: its 16 rows of W (32 KB contiguous
// at K = 4096) and of the scales (1 KB). The prefetch holds no register and no shared
// memory, so DRAM sees ~660 blocks' worth of 32 KB requests at once, and a block whose tile
// was prefetched a wave earlier reads W as L2 hits, not DRAM accesses. The
// first AHEAD blocks, which nothing prefetched for, also prefetch their own tile, so that
// their later groups hit L2 too; AHEAD = 0 is that alone, for every block. AHEAD is in
// tiles: 660 is one wave at 5 blocks an SM on 132 SMs, ~21 MB of W ahead of the reads, well
// inside the H200's 60 MiB L2.
// Hypothesis: the read becomes DRAM's and L2's, not the warps' registers': >= 75 % of the
// read ceiling at 1 x 28672 x 4096 (09: 60.7 %), which is >= 3x cuBLAS BF16 there and at
// 1 x 128256 x 4096; at 16 x 28672 x 4096, where 09's tensor-core work is twice M = 1's,
// smaller gains.
// What ncu should show: the same SASS as 09 but one UBLKPF-class instruction a block; DRAM
// throughput well above 49 %; long-scoreboard stalls down; lts__t_bytes near 09's (a
// prefetched line read once from DRAM, then hit).
//
// Sizes, launch: 09's (grid cdiv(N, 16), block 32 * WARPS).
#define W4_L2_PREFETCH 1
#ifndef AHEAD
#define AHEAD 660  // tiles: block b prefetches tile b + AHEAD (one wave of 5 x 132 blocks)
#endif
#include "09_offset_mma.cu"

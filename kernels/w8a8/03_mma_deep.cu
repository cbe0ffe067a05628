// 03_mma_deep: 02's kernel with more of W in flight: UNR chunks of K loaded before any is
// used, and the warps a block (which split K) tuned with it.
//
// Changed from 02: at M = 16 (H200, ec90bc9) 02 beats torch._scaled_mm at 14336 x 4096 and
// 128256 x 4096, is 0.8 % slower at 28672 x 4096, and far slower where N = 4096 (60 against
// 37 us at 4096 x 14336, 19 against 13 at 4096 x 4096): there 256 blocks of 4 warps hold ~8 warps an SM with one
// 16-byte load of W (and two of x) in flight each, ~4 KB an SM, far under the ~40 KB that
// HBM needs. UNR = 4 issues four chunks' loads (64 bytes of W a lane) before the mmas, and
// 8 warps a block double the warps an SM at N = 4096.
// Hypothesis: the N = 4096 shapes become bandwidth-bound like the tall ones: >= 80 % of the
// read ceiling at M = 16 on every shape, faster than torch._scaled_mm on all five.
// What ncu should show: dram__throughput up at N = 4096; long-scoreboard stalls per issue
// down; the same mma count as 02.
//
// Sizes, launch and shared memory: 02's (WARPS * NT * 4 * 32 floats).
#include "02_mma_e4m3.cu"

// 10 The best: 09's kernel with a staged epilogue, autotuned.
//
// What changed (after 09): the consumers store C through shared memory (STAGED_EPILOGUE:
// sm90.cuh's store_tile_staged, 2 KiB a consumer warp after the ring), 16-byte stores of
// whole 128-byte row segments instead of bf16x2 stores that scatter 8 rows over each warp
// instruction. The study's tune: space fans out over the output tile's width BN (128 or 256
// columns: 64 or 128 accumulators a consumer thread), the ring depth STAGES (as deep as 227
// KiB allows) and the cluster size CLUSTER_M (1: no multicast, 2: B shared by two blocks);
// every candidate is its own job, and the fastest at each tuning size becomes this variant
// there: 4096^3 and 8192^3, the K-tail shape 4096x4096x4104 and 1000^3, where the 128-wide
// tile's 64 tiles fill more of the 132 SMs than the 256-wide tile's 32.
//
// Why it should help: at K = 4104 every row of A and B is 8208 bytes, 16 bytes past a
// multiple of 128, so no 128-byte TMA box row is line-aligned: ncu counts 2.8x the L2
// requests of 4096^3 (11.8 M -> 33.4 M for 08), L2 at 79 % of its peak throughput, and 08
// loses 36 % (0.197 -> 0.307 ms; at K = 4160, 65 whole K tiles with 128-byte aligned rows, it
// runs at 4096^3's rate: the zero-filled partial tile costs nothing). The K tail is free; the
// misaligned rows are not. Fewer requests per FLOP is the fix: B multicast to a 2-block
// cluster (09, once its barriers stopped fencing the whole GPU: sm90.cuh) cuts the loads by
// a third, and the staged epilogue cuts C's store requests 8x (about 2 M of 25 M requests
// at 4096^2 outputs).
//
// What ncu should show: lts__t_requests_srcunit_tex down from 09's at the same size (about 2
// M fewer at 4096x4096), lts__throughput lower at K = 4104. Measured on the H200 at
// 4096x4096x4104, BN 256, 4 stages, clusters of 2: 21.3 M -> 19.5 M requests, L2 throughput
// 74 % -> 71 % of peak, 0.216 -> 0.195 ms (94.8 % of cuBLAS; 98.8 % at 4096^3); few bank
// conflicts in the epilogue (0.1 a shared store, 2.4 a 16-byte shared load).
#ifndef ENTRY
#define ENTRY hgemm_best
#endif
#define STAGED_EPILOGUE 1
#include "09_cluster_multicast.cu"

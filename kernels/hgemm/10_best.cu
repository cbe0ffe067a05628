// 10 The best: 09's kernel, autotuned.
//
// What changed (after 09): nothing in the code. The study's tune: space fans out over the
// output tile's width BN (128 or 256 columns: 64 or 128 accumulators a consumer thread),
// the ring depth STAGES (as deep as 227 KiB allows), the cluster size CLUSTER_M (1: no
// multicast, 2: B shared by two blocks) and the raster group GROUP_M; every candidate is
// its own job, and the fastest at each tuning size becomes this variant.
//
// Why it should help: the right tile and depth depend on the shape (a 128 x 256 tile leaves
// fewer partial waves on 132 SMs at some sizes, 128 x 128 at others; deeper rings absorb
// L2 latency spikes), and measuring them is cheaper than guessing.
//
// What ncu should show: the winner's profile, against 09's at the same size.
#ifndef ENTRY
#define ENTRY hgemm_best
#endif
#include "09_cluster_multicast.cu"

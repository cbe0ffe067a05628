// 19_l2_ahead: 18 with each warp asking L2 for its group AHEAD groups past the one it loads
// next, so that more of W is on its way from DRAM than the one group a warp holds in registers.
//
// Changed from 18: one prefetch.global.L2 per lane and 16 bytes of W for the group AHEAD past
// the next, issued right after the next group's loads (and, before the walk begins, for the
// first AHEAD past the first). No register holds what it asks for; the load of that group,
// AHEAD groups later, finds it in L2.
// Why: 18's ncu at 1 x 28672 x 4096 (measured at cbb1177) has the warps waiting on W more than
// 13's do (the long-scoreboard stall 7.9 warps an issue against 5.3) at DRAM 59.9 % of peak:
// each warp keeps one 1 KB group in flight, 32 KB an SM, and a group's turn is a DRAM round
// trip. Holding a second group in registers costs the occupancy that 13's UNR 2 and 15's and
// 16's PREFETCH 1 lost on (80 registers, 24 warps an SM); a request to L2 costs none. 12 asked
// L2 for whole tiles of the row-major W ahead with the bulk prefetch and lost to 09 (a tile's
// 2 KB rows apart); here the requests are the warp's own next 1 KB, contiguous in Wt.
// Hypothesis: a group's load a round trip to L2 rather than to DRAM once the walk is under way:
// DRAM throughput towards the read ceiling, below 18.0 us at 1 x 28672 x 4096 (3x cuBLAS BF16
// at its 53.98 us in the run at cbb1177).
// What ncu should show: dram__throughput above 18's 59.9 % of peak, the long-scoreboard stall
// below 18's 7.9, lts__t_bytes up by the prefetches' requests (dram__bytes_read unchanged).
//
// Sizes, launch: 18's.
#ifndef AHEAD
#define AHEAD 2
#endif
#include "18_tiled_lean.cu"

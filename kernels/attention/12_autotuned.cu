// Step 12: 11's kernel, its key tile (BN) and K/V ring depth (STAGES) tuned per shape (sm_90a).
//
// What changed from 11: nothing in the code; the config fans it out over BN in {64, 128} and
// STAGES in {2, 3, 4} (those whose ring fits 227 KiB at D = 128: five candidates), each a job
// of its own, benched at the three shapes the targets name (B4 H16 S4096 D128, causal and
// not; B8 H32 S2048 D64), the fastest correct one per shape taken there; elsewhere the
// headline's winner runs.
//
// Why it should help: at D = 64 a key tile's GEMMs are half as long as at D = 128, so two
// stages give TMA half the time to bring the next K and V; a third or fourth stage (the ring
// at D = 64 is half the bytes) keeps them ahead. BN = 64 halves a warpgroup's registers for S
// and P and the keys a tile, and doubles the tiles (more barriers, more max and sum
// shuffles): whether that pays is a measurement.
//
// What ncu should show (the headline's winner): the computing warps' wait on the K and V
// barriers (long scoreboard on SYNCS.PHASECHK) down where a deeper ring wins.
// Measured (H200, `kernelbook bench` of all five candidates at the three shapes, 8510747):
// BN = 128 with 2 or 3 stages are 11 to 0.1 % (668.2 and 668.1 TFLOP/s at the headline,
// 572.4 and 571.2 causal, 407.2 and 406.2 at D = 64); every BN = 64 candidate is 18-21 %
// slower at all three (529-542, 453-465, 331-335), a deeper ring changing nothing. The
// per-tile costs that BN = 64 doubles (the max and sum shuffles, the barrier round trips,
// a wgmma group of m64n64 instead of m64n128) outweigh its halved registers, and two stages
// already keep TMA ahead. So the tuned step is 11 with a fan-out that confirms 11's tile.
#define FA3_WS 1
#define FA3_PINGPONG 1
#define FA3_OVERLAP 1
#define FA3_FAST_EXP 1
#include "fa3.cuh"
FA3_ENTRY(attn_autotuned)

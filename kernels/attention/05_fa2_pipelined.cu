// Step 05: 04 with swizzled shared memory and a cp.async double buffer for K and V.
//
// What changed from 04: K and V tiles come in by cp.async (LDGSTS, global to shared without
// registers) into two stages: tile j+1 is in flight while tile j's two products and softmax
// run. Tiles are unpadded with their 16-byte chunks XOR-swizzled by row (chunk c of row r at
// c ^ (r mod 8)), so ldmatrix stays conflict-free at 12 % less shared memory per tile.
// Why it helps: 04 stalls on each tile's loads before any math; here the loads of the next
// tile overlap the math of this one, so the tensor pipe waits only on the barrier.
// What ncu should show: LDGSTS in the SASS; long-scoreboard stalls mostly gone, barrier and
// math-pipe-throttle stalls next; tensor-pipe utilisation up; shared-memory bank conflicts
// still ~0.
#define FA_SWIZZLE 1
#define FA_ASYNC 1
#define FA_CAUSAL_SKIP 0
#include "fa2.cuh"
FA2_ENTRY(attn_fa2)

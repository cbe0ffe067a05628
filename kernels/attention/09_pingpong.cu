// Step 09: ping-pong: the two computing warpgroups take turns at the tensor core (sm_90a).
//
// What changed from 08: each computing warpgroup issues its S = Q·Kᵀ only after the other has
// issued its own, on two named barriers (bar.sync on its own, bar.arrive on the other's once
// its wgmmas are issued; warpgroup 1 hands warpgroup 0 the first turn). Their GEMMs then
// alternate: while warpgroup 0 waits for its S and runs the softmax (exp2 on the MUFU, row
// max and sum by shuffles), warpgroup 1's S, then its P·V, keep the tensor core busy, and
// the other way round.
//
// Why it should help: in 08 nothing keeps the two warpgroups out of phase; when both reach
// their softmax at once the tensor core idles (the softmax is about a third of a tile's time
// at D = 128: 128 exp2 a row a tile against 2 x 128 x 128 x 2 FLOP on the tensor core).
// FlashAttention-3 measured this scheduling at about 570 -> 620 TFLOP/s on the H100 at D = 128.
//
// What ncu should show: BAR.SYNC / BAR.ARV on barriers 1 and 2 in the SASS; tensor-pipe
// utilisation up from 08 at the same instruction mix; the computing warps' stall on the named
// barrier small next to their wgmma wait.
// Measured (H200, b251974): 580.9 TFLOP/s, the same as 08 (0.9991x, interval [0.9969,
// 0.9997]); tensor pipe 60.4 % against 08's 60.3 %, barrier stall 1.19 against 1.17. The turns
// did not buy tensor-core time: each warpgroup still waits for its own P·V before its next
// softmax and for its softmax before its next P·V, so its turn comes round no sooner; 10
// breaks that chain.
#define FA3_WS 1
#define FA3_PINGPONG 1
#include "fa3.cuh"
FA3_ENTRY(attn_pingpong)

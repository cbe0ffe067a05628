// Step 08: producer/consumer warp specialization with setmaxnreg (sm_90a).
//
// What changed from 07: a third warpgroup, the producer, only issues the TMA copies: one of
// its threads keeps the 2-stage K/V ring full, waiting on each stage's "empty" mbarrier
// before refilling it, and gives its registers back (setmaxnreg down to 24 a thread). The two
// computing warpgroups (setmaxnreg up to 240) no longer meet at a block barrier after every
// tile: each of their warps frees a stage with one mbarrier arrive when its P·V has read it,
// so one warpgroup can run ahead of the other by a tile.
//
// Why it should help: in 07 every tile ends with both warpgroups waiting at __syncthreads and
// thread 0 then issuing the next copies, so the slower warpgroup sets the pace and the copy
// of tile j + 2 starts only after tile j. Here the copies run ahead as far as the ring allows,
// and the two warpgroups drift apart, so one's softmax can meet the other's GEMMs on the
// tensor core (by chance here; by turns in 09).
//
// What ncu should show: SETMAXREG in the SASS, no block-wide BAR in the main loop; tensor-pipe
// utilisation up from 07; barrier stalls down, the consumers' stalls on wgmma (wait) and on
// the softmax's MUFU.EX2 (math-pipe throttle) left. 168 registers a thread at the launch cap
// (384 threads), the consumers' real budget 240.
// Measured (H200, b251974): 581.4 TFLOP/s, 1.13x 07; tensor pipe 60.3 %; the barrier stall
// (now the mbarrier waits) 1.17, long scoreboard 0.55.
#define FA3_WS 1
#include "fa3.cuh"
FA3_ENTRY(attn_warp_specialized)

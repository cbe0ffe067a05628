// Step 10: intra-warpgroup overlap: the softmax of one key tile runs under the P·V product of
// the tile before it (sm_90a).
//
// What changed from 09: each computing warpgroup's loop is software-pipelined by one tile. In
// its turn at the tensor core it issues S(j) = Q·K(j)ᵀ and then O += P(j-1)·V(j-1) as two
// commit groups; it waits for the first alone (wgmma.wait_group 1), runs S(j)'s masking and
// online softmax while the product is still in flight, and only then waits for the product,
// rescales O by the new row maxima and packs P(j). A prologue computes S(0) and its softmax,
// an epilogue the last P·V. K and V stages are freed on barriers of their own: K as soon as
// S(j) has landed, V once its product has, so the producer refills K a tile ahead of V.
//
// Why it should help: in 09 a warpgroup's own softmax still waits for its own P·V, and its
// P·V for its own softmax; ping-pong hides that chain only while the other warpgroup has
// GEMMs to issue. Here the exp2 work (MUFU) and the row max and sum (shuffles) of one tile
// overlap the tensor core's work on the previous one inside a warpgroup as well.
// FlashAttention-3 reports this two-stage pipelining at about 570 -> 620-660 TFLOP/s with
// warp specialization on the H100 at D = 128.
//
// Cost: S(j)'s fp32 accumulators (BN / 2 registers), P(j-1)'s bf16 fragments (BN / 4) and O
// (D / 2) are all live at once; with setmaxnreg 240 they fit without spills.
//
// What ncu should show: the same HGMMA count as 09; the computing warps' wait on the wgmma
// group (the scoreboard stall after WARPGROUP.DEPBAR) down, tensor-pipe utilisation up.
// Measured (H200, b251974): 638.5 TFLOP/s, 1.099x 09, 94.02 % of SDPA cuDNN; tensor pipe
// 68.0 % (09: 60.4 %); barrier stall 0.19 (09: 1.19); dispatch stall up to 0.64 (09: 0.20).
// Causal 543.1 TFLOP/s, D = 64 (B8 H32 S2048) 383.2. 18160 SASS instructions (09: 3200):
// the loop unrolled by two, each softmax with a masked and an unmasked body.
#define FA3_WS 1
#define FA3_PINGPONG 1
#define FA3_OVERLAP 1
#include "fa3.cuh"
FA3_ENTRY(attn_intra_overlap)

// Step 14: three computing warpgroups a block, 192 queries, at D = 64 (sm_90a).
//
// What changed from 11: BM = 192 rows of Q a block, three computing warpgroups of 64 rows
// and the producer: 512 threads, setmaxnreg 24 for the producer and 160 for each computing
// warpgroup. The three take their turns at the tensor core round (named barriers 1, 2, 3),
// the K and V tiles of 64 keys (BN = 64: S, P and its second buffer fit 160 registers with
// O at D = 64, 96 a thread) are read by three warpgroups instead of two. D = 64 only: at
// D = 128, O alone is 64 registers and 160 do not hold the overlapped loop without spilling.
//
// Why it should help: at D = 64 a warpgroup's GEMMs of a tile (64 x 64 x 64 and 64 x 64 x 64
// at BN = 64) are short next to its softmax; with two warpgroups, while one computes its
// softmax the other has too little tensor-core work to cover it. A third warpgroup's GEMMs
// fill that gap, and each K and V tile brought by TMA serves 192 queries instead of 128.
// FlashAttention-3 takes 192-query blocks at head size 64 on Hopper.
//
// What ncu should show: tensor-pipe utilisation up at D = 64 against 11's and 12's; the
// computing warps' named-barrier stall (waiting for their turn) larger than at two, the MUFU
// busier.
// Measured (H200, bench at 8510747, beside 11): 402.4 TFLOP/s at B8 H32 S2048 D64 against
// 11's 407.6: slower. ncu at that shape (`kernelbook profile --size`): tensor pipe 43.5 %
// active, the MUFU (XU pipe) 46.3 %, issue slots 56 %; stalls an issue: long scoreboard 0.66
// (the warps' waits on the K and V barriers), dispatch 0.54, barrier 0.31 (the turns), MIO
// throttle 0.26; 128 registers at launch (160 after setmaxnreg). Neither pipe is near full:
// with BN = 64, the per-tile overheads of 12's BN = 64 candidates come back (twice the tiles,
// each with its max, sum and barrier round trips), and a third warpgroup's turn makes each
// wait for two others. The D = 64 target (450) is missed by 11-14 alike; what FlashAttention-3
// does instead is 192 keys a tile with P through shared memory (no P registers to hold).
#define FA3_WS 1
#define FA3_PINGPONG 1
#define FA3_OVERLAP 1
#define FA3_FAST_EXP 1
#define FA3_HEAD_DIM 64
#include "fa3.cuh"
FA3_ENTRY(attn_three_warpgroups)

// Step 07: WGMMA + TMA (sm_90a): FlashAttention-2's loop on Hopper's own instructions.
//
// What changed from 05/06 (mma.sync m16n8k16, ldmatrix, cp.async): Q and each 128-key tile
// of K and V come in by TMA (one thread issues the copies) into 128-byte-swizzled shared
// memory, completing on mbarriers, K and V on separate barriers so that S = Q·Kᵀ starts
// before V has landed; K/V tiles go round a 2-stage ring. Two warpgroups own 64 query rows
// each: S is wgmma m64n128k16 from shared-memory descriptors (8 for D = 128), the online
// softmax runs on S's registers, and P, rounded to bf16 in place, is the register A operand
// of O += P·V (wgmma m64nDk16, V read N-major through the transposed-B descriptor: 8 a tile).
// Every tile ends with wgmma.wait_group 0 and a block barrier, as hgemm's 06 did.
//
// Why it should help: one wgmma m64n128k16 does the work of 64 mma.sync m16n8k16 with no
// ldmatrix and no address arithmetic; 05 spent its issue slots on those (ncu: 05 issue-bound).
// 128 x 128 tiles halve the K/V traffic per FLOP against 05's 64 x 64.
//
// What ncu should show: HGMMA in the SASS and no HMMA / LDSM; UTMALDG and SYNCS for the
// loads; tensor-pipe utilisation well above 05's; the softmax between the two GEMMs and the
// per-tile barrier leave the tensor pipe idle part of each tile (stall: wait, barrier),
// which the warp-specialized and ping-pong steps attack. One block an SM (160 KiB of shared
// memory at D = 128).
// Measured (H200, b251974, ncu at B4 H16 S4096 D128): 515.1 TFLOP/s, 2.35x 06; tensor pipe
// 53.6 % of peak; barrier stall 1.38 a issued instruction, the largest; 186 registers.
#include "fa3.cuh"
FA3_ENTRY(attn_wgmma_tma)

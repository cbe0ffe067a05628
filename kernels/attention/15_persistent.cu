// Step 15: a persistent kernel, one block an SM, its next query tile loading under this one
// (sm_90a).
//
// What changed from 11: the grid is min(query tiles, SMs) blocks, and each block computes
// every gridDim.x-th query tile (cdiv(S, BM) * B * H of them, in 11's order: a (b, h)'s
// query blocks one after another). Causal keeps one block a tile (the config's grid): its
// tiles are unequal, the last query block of a (b, h) has nq times the keys of the first,
// and a static share of every 132nd tile leaves some SMs a fifth more keys than others at
// B4 H16 S4096, where the hardware's block scheduler balances them. The producer does
// not stop at a tile's end: Q has two buffers, and the K/V ring's counter runs on across
// query tiles, so the next tile's Q and first K and V tiles arrive while the computing
// warpgroups finish the current one (the last P·V, O / l, the stores). A Q buffer is freed
// when both warpgroups' last wgmma of its tile has landed, and the tile's last V stage with
// it (in 11 nothing waits for it).
//
// Why it should help: 11 launches one block a query tile, and one block fills an SM (160 KiB
// of shared memory at D = 128, 384 threads with setmaxnreg 240). Between two blocks on an SM
// the tensor core idles for the block's end (the last P·V alone, the stores), the next
// block's launch, its barrier set-up and its first TMA loads, and the prologue (S(0) and its
// softmax with no P·V to overlap). At B4 H16 S4096 D128 that is 32 key tiles a query tile,
// so a gap of one or two tiles' time is a few per cent; at S = 2048, D = 64 twice that.
//
// What ncu should show: launch__grid_size 132 (the SM count); the computing warps' wait on
// the Q barrier and the first K barrier of a tile near zero; tensor-pipe utilisation up by
// the gap, most at D = 64 and for the short causal tiles.
// Measured (H200, tables at be3392c, beside 11): 691.0 TFLOP/s at B4 H16 S4096 D128 against
// 11's 662.2 (1.044x; cuDNN 674.8 beside it: 102.4 %), causal 578.8 (99.1 % of cuDNN; one
// block a tile there, so 11's 569.9 was the bar), D = 64 430.2 against 408.2. ncu at the
// headline: launch__grid_size 132, tensor pipe 74.9 % against 11's 71.5 %, gpu time 803 us
// against 834; at D = 64 44.5 % against 42.3 %, with the MUFU (XU pipe) at 46.1 %: as busy
// as the tensor core, which 16 takes up.
#define FA3_WS 1
#define FA3_PINGPONG 1
#define FA3_OVERLAP 1
#define FA3_FAST_EXP 1
#define FA3_PERSISTENT 1
#include "fa3.cuh"
FA3_ENTRY(attn_persistent)

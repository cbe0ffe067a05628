// Step 06: 05 with causal block skipping.
//
// What changed from 05: when causal, a block stops at the key tile that holds its last
// query (ceil((q0 + 64) / 64) tiles instead of all of them), and masks only the tiles that
// cross its warps' diagonals; tiles that are wholly below the diagonal run unmasked.
// Why it helps: 04/05 visit every tile above the diagonal only to zero it: half the causal
// work is wasted. The study counts causal FLOPs as half (FlashAttention's convention), so
// 04/05's causal TFLOP/s is about half their non-causal; 06 should bring it back near the
// non-causal rate (a little below: the diagonal tiles are masked, and the blocks are uneven,
// the last query blocks doing the most work). Non-causal timings equal 05's.
// What ncu should show: for causal sizes, half the HMMA instructions executed of 05, the same
// per-tile stall profile.
#define FA_SWIZZLE 1
#define FA_ASYNC 1
#define FA_CAUSAL_SKIP 1
#include "fa2.cuh"
FA2_ENTRY(attn_fa2)

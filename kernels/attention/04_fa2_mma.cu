// Step 04: FlashAttention-2 on the tensor cores (mma.sync m16n8k16 bf16, ldmatrix).
//
// What changed from 03: both products run on the tensor cores. A block of WARPS = 4 warps
// owns 64 queries, 16 a warp (the work split across warps over queries, so the softmax
// statistics of a row stay inside one warp's quad of threads: no shared-memory exchange);
// the warp's Q sits in registers as mma A fragments for the whole kernel; each K/V tile of 64
// keys is copied to shared memory (plain 16-byte loads, rows padded by 16 bytes so that
// ldmatrix's 8 rows fall in 8 different bank groups), S = Q·Kᵀ is 16x64 accumulators per
// warp, the online softmax runs on them in registers, and P, rounded to bf16, is reused in
// place as the A operand of O += P·V (V fragments by ldmatrix.trans). Causal: tiles above the
// diagonal are still visited, fully masked.
// Why it helps: mma.sync does 16·8·16 multiply-adds a warp-instruction against 03's one FFMA
// a thread, and a K/V tile is read once from global memory for 64 queries.
// What ncu should show: HMMA.16816.F32.BF16 and LDSM in the SASS; the tensor pipe well used
// but not saturated: each tile waits on its own synchronous global loads (long-scoreboard
// and barrier stalls), no bank conflicts on LDSM; ~170 registers, no spills.
#define FA_SWIZZLE 0
#define FA_ASYNC 0
#define FA_CAUSAL_SKIP 0
#include "fa2.cuh"
FA2_ENTRY(attn_fa2)

// Step 11: the softmax's 2^x as one MUFU.EX2 (sm_90a).
//
// What changed from 10: every exp2 of the softmax (the BN scores of a row a tile, and the
// rescaling factor) is `ex2.approx.ftz.f32` instead of exp2f. exp2f keeps results below
// 2^-126 exact: around each MUFU.EX2 it compares the argument with -126, halves it where it
// is below, and squares the result (FSETP, then two predicated FMULs). A softmax whose row
// maximum is 2^0 loses nothing to flushing those to zero: such a P is under the row sum's
// rounding, and under bf16's, before it reaches the P·V product.
//
// Why it should help: after 10, the softmax runs under the P·V product, so the question is
// whether the computing warpgroups can issue it in the time the tensor core takes. Per score
// the softmax issued about 7.5 instructions (FFMA for the scale and max, MUFU.EX2, FSETP and
// two FMULs, FMNMX for the max, FADD for the sum, half an F2FP for the bf16 pack); this
// takes three away. The gain should be largest at D = 64, where a tile's GEMMs are half as
// long for the same softmax.
//
// What ncu should show: three fewer FP32 instructions a score (sm__sass_thread_inst_executed
// of FMUL down by two a score); issue slots and the dispatch stall down; tensor-pipe
// utilisation up, most at D = 64.
#define FA3_WS 1
#define FA3_PINGPONG 1
#define FA3_OVERLAP 1
#define FA3_FAST_EXP 1
#include "fa3.cuh"
FA3_ENTRY(attn_fast_exp2)

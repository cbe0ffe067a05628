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
// Measured (H200, `kernelbook bench attention 10_intra_overlap 11_fast_exp2` at 8ef0ef7, side
// by side): 663.2 TFLOP/s against 10's 632.8 at B4 H16 S4096 D128 (0.8289 ms, SDPA cuDNN
// 0.8202 ms: 98.9 %); causal 573.3 against 543.4 (cuDNN 0.4752 ms against 0.4795: 99.1 %);
// D = 64 (B8 H32 S2048) 410.0 against 384.2 (cuDNN 0.5898 ms: 88.0 %). Not yet in the
// published page. ex2.approx.ftz.bf16x2 is no way to double the MUFU's rate on sm_90: it
// compiles to two MUFU.EX2.BF16.
// Again at 8510747 (bench, beside 12-14): 668.1 TFLOP/s, 0.8228 ms against SDPA cuDNN's
// 0.8123 ms (98.7 %: the issue's 100 % missed by 1.3 points); causal 572.7 (cuDNN 0.4763 ms
// against 0.4799); D = 64 407.6 (cuDNN 0.5956 ms, 461.5 TFLOP/s: 88.3 %; the 450 target
// missed, see 13 and 14 for two attacks on it).
#define FA3_WS 1
#define FA3_PINGPONG 1
#define FA3_OVERLAP 1
#define FA3_FAST_EXP 1
#include "fa3.cuh"
FA3_ENTRY(attn_fast_exp2)

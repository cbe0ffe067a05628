// Step 13: a quarter of the softmax's exp2s on the FP32 pipe (sm_90a).
//
// What changed from 11: in a key tile with no masked key, every fourth pair of the exp2s is
// exp2_fma.cuh's cubic (FMNMX, 3 FADD, 3 FFMA and a shift-add into the exponent field) instead
// of MUFU.EX2; the other three quarters, the rescaling factor and every masked tile stay on
// the MUFU.
//
// Why it should help: an SM's MUFU does 16 exp2 a cycle, its FP32 pipe 128 FMAs. A
// computing warp's softmax of a 64 x 128 tile is 64 exp2 a lane: 512 cycles of its SM
// sub-partition's MUFU, and each sub-partition holds one warp of each computing warpgroup,
// so 1024 MUFU cycles a tile pair against the tensor core's 1024 for both warpgroups'
// GEMMs at D = 64 (2048 at D = 128). At D = 64 the MUFU is as busy as the tensor core, and
// the two warpgroups' softmaxes, which ping-pong cannot keep apart when the GEMMs are that
// short, queue on it. Moving a quarter to the FP32 pipe takes 128 MUFU cycles off each warp
// for ~112 more issue slots: the two balance near a sixth to a quarter.
//
// What ncu should show: MUFU.EX2 down by a quarter in the SASS and in the executed
// instruction mix, FFMA and FADD up; at D = 64, the MUFU pipe's utilisation down and the
// tensor pipe's up. At D = 128, where the MUFU has room, little change or a small loss.
// Measured (H200, bench at 8510747, beside 11): D = 64 413.8 TFLOP/s against 11's 407.6
// (+1.5 %, 0.6642 ms against cuDNN's 0.5949: 89.6 % of it); at D = 128 635.4 against
// 668.1 (-4.9 %), causal 547.8 against 572.8: there the MUFU had room, and the cubic's seven
// FP32 instructions a pair cost issue slots the softmax under P·V did not have.
#define FA3_WS 1
#define FA3_PINGPONG 1
#define FA3_OVERLAP 1
#define FA3_FAST_EXP 1
#define FA3_POLY_EXP 4
#include "fa3.cuh"
FA3_ENTRY(attn_fma_exp2)

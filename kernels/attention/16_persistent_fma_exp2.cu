// Step 16: at D = 64, 15's persistent kernel with 13's exp2s on the FP32 pipe (sm_90a).
//
// What changed from 15: every fourth pair of an unmasked tile's exp2s is exp2_fma.cuh's cubic
// instead of MUFU.EX2 (13's FA3_POLY_EXP = 4), and the kernel holds the D = 64 body only
// (FA3_HEAD_DIM = 64; the D = 128 sizes are skipped rows, 15 being the step there).
//
// Why it should help: the tables run at 30d6618 measured the two ideas apart at B8 H32 S2048
// D64: 11 402.2 TFLOP/s, 13 (the cubic) 415.4, 15 (persistent) 432.9, cuDNN 464.9 (0.5913
// ms, beside 15). They
// attack different losses: 15 the gap between one query tile's end and the next one's start
// on an SM, 13 the MUFU, which at D = 64 is as busy as the tensor core (a 64 x 128 tile's
// 8192 exp2 are 512 MUFU cycles of a sub-partition against 1024 tensor-core cycles for both
// warpgroups' GEMMs). At D = 128, 13 lost 5 % to 11: the MUFU had room there and the cubic
// took issue slots, hence D = 64 only.
//
// What ncu should show: against 15 at D = 64, MUFU.EX2 executed down by a quarter and the XU
// pipe's utilisation with it, FFMA up, tensor-pipe utilisation up; the target is 450
// TFLOP/s at B8 H32 S2048 D64.
// Measured (H200, tables at be3392c): 450.6 TFLOP/s at B8 H32 S2048 D64 against 15's 430.2
// (1.047x) and cuDNN's 467.0 beside it (96.5 %): the target, by 0.6 TFLOP/s. ncu there
// against 15: XU pipe 37.4 % against 46.1 %, FFMA 1.87e9 against 1.12e9, tensor pipe 46.7 %
// against 44.5 %, issue slots 54.5 % against 42.7 %; MIO throttle 0.02 against 0.37 and long
// scoreboard 0.52 against 0.68 stalls an issue. The tensor pipe is still under half busy:
// the next loss is the issue slots (the cubic's FFMAs and the softmax), as in 14's profile.
#define FA3_WS 1
#define FA3_PINGPONG 1
#define FA3_OVERLAP 1
#define FA3_FAST_EXP 1
#define FA3_PERSISTENT 1
#define FA3_POLY_EXP 4
#define FA3_HEAD_DIM 64
#include "fa3.cuh"
FA3_ENTRY(attn_persistent_fma_exp2)

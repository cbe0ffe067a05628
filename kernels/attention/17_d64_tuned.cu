// Step 17: 16 at D = 64, its share of exp2s on the FP32 pipe and its K/V ring depth tuned
// (sm_90a).
//
// What changed from 16: nothing in the code; the config fans it out over POLY, the cubic's
// share (every POLY-th pair of an unmasked tile's exp2s off the MUFU: 2, 3, 4 or 6; 16 is 4),
// and STAGES (2 or 3), each candidate a job of its own, benched at B8 H32 S2048 D64 and the
// fastest correct one taken; at the other D = 64 sizes that winner runs.
//
// Why it should help: 16's quarter was 13's choice at D = 64, set before the persistent
// kernel changed the balance. 16's profile at B8 H32 S2048 D64 (tables at be3392c) has the
// XU pipe (MUFU) 37.4 % busy, the tensor pipe 46.7 % and the issue slots 54.5 %: none of
// the three is saturated, so where the balance lies between a busier MUFU (POLY 6) and
// more FP32 instructions for the cubic (POLY 2 or 3: a third or half of the pairs, seven
// FP32 instructions each) is for the measurement. A third K/V stage gives TMA another
// tile of lead where a D = 64 tile's GEMMs are half as long as at D = 128 (12 found two
// enough for the non-persistent kernel; the persistent one also loads the next query tile's
// first K and V under this one's end).
// Hypothesis: >= 465 TFLOP/s at B8 H32 S2048 D64 (16: 456 at 567eb07), and so the target
// of 450 met by more than a run-to-run spread, and cuDNN (470.7 beside 16) within 1 %.
// What ncu should show (the winner against 16): the XU pipe's and the FMA pipe's
// utilisation moving opposite ways with POLY, the tensor pipe's up where the winner wins;
// with STAGES 3, the computing warps' long-scoreboard stalls on the K/V barriers down.
#define FA3_WS 1
#define FA3_PINGPONG 1
#define FA3_OVERLAP 1
#define FA3_FAST_EXP 1
#define FA3_PERSISTENT 1
#define FA3_POLY_EXP POLY
#define FA3_HEAD_DIM 64
#include "fa3.cuh"
FA3_ENTRY(attn_d64_tuned)

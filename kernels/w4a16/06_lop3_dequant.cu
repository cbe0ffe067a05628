// 06_lop3_dequant: 04 with each nibble pair's mask-and-OR one LOP3 instead of two.
//
// Changed from 04: ncu at 1x28672x4096 showed 04 at 46 % of DRAM peak with the SM's pipes
// the limit, not memory: math-pipe-throttle 0.98 and not-selected 1.02 stalls an issue
// (long-scoreboard only 2.8), sm__throughput 54 %. Its SASS spends, for each 32-bit word of
// W (8 weights), 3 SHF, 8 LOP3, 4 HADD2.BF16 and, per 16-byte load of x, 4 PRMT: the C
// expression (q & 0x000F000F) | 0x43004300 has two immediates and a LOP3 takes one, so
// nvcc emits two. Here that expression is one lop3.b32 (lut 0xEA) with both constants in
// registers (w4mma.cuh, W4_FUSED_LOP3): 3 SHF + 4 LOP3 a word, 7 integer-pipe instructions
// instead of 11, and per scale group of a lane (8 words, 4 loads of x) 72 instead of 104.
// Nothing else changes: same tiles, loads, mmas and scales (this file is 04's, built with
// W4_FUSED_LOP3 = 1).
// Hypothesis: 04 is bound by its integer pipe at M = 1, so ~30 % fewer of those instructions
// make it ~25 % faster on the tall layers: >= 2.6x the BF16 cuBLAS GEMV on 28672 x 4096.
// What ncu should show: LOP3.LUT count halved in the SASS; math-pipe-throttle stalls down;
// dram__throughput up from 46 %.
//
// Sizes, launch: 04's.
#define W4_FUSED_LOP3 1
#include "04_mma_dequant.cu"

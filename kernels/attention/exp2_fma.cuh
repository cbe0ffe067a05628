// 2^x on the FP32 pipe, for the attention softmax's exp2s that the MUFU does not take (step 13;
// FA3_POLY_EXP in fa3.cuh). Plain arithmetic, so the CPU tests compile it too (KERNELBOOK_EMU).
//
// x = j + f, j the nearest integer and f in [-0.5, 0.5]: adding 1.5 * 2^23 rounds x to an
// integer in the low bits of the sum (r), and r - 1.5 * 2^23 is that integer exactly. 2^f is
// a cubic in f, fitted for relative error over [-0.5, 0.5] (7.5e-5 at most in float32 on a
// dense grid: a fiftieth of bf16's rounding, which P takes next); j goes into the exponent
// field as (bits of r) << 23, which keeps j's bits and shifts 1.5 * 2^23's out. x is first
// clamped to -126: at and under it the result is a denormal or less (under 2^-125), nothing
// in a row sum of at least 1. 8 instructions (FMNMX, 3 FADD, 3 FFMA, a shift-add) against one
// MUFU.EX2, but on a pipe with 8 times the MUFU's lanes.
#pragma once

#ifdef KERNELBOOK_EMU
#include <cstring>
inline float kb_int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int kb_float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
#else
#define kb_int_as_float __int_as_float
#define kb_float_as_int __float_as_int
#endif

__device__ __forceinline__ float exp2_fma(float x)
{
  x = fmaxf(x, -126.0f);
  const float r = x + 12582912.0f;  // 1.5 * 2^23
  const float f = x - (r - 12582912.0f);
  const float p = fmaf(fmaf(fmaf(0.0551716648f, f, 0.242611125f), f, 0.693260968f), f, 0.999928057f);
  return kb_int_as_float(kb_float_as_int(p) + (kb_float_as_int(r) << 23));
}

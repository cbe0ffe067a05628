// What the w4a16 steps share: the walk of W's 4-bit rows, ROWS rows a warp, every batch row
// of x against each W load; the dequantization is the steps' subject (DEQUANT_MAGIC).
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
//
// The layout (kernelbook.problems.w4a16): row n of Wq is K / 8 words, nibble j of word c is
// q[n][8c + j]; row n of S is K / 128 bf16 scales; w = (q - 8) * S[n][k / 128]. A lane's
// step is one 16-byte load of a row: 4 words, 32 weights, all in one scale group (a group is
// 128 weights, 4 lane steps). Each word's 8 weights are dequantized to FP32 once (times the
// scale) and then serve every batch row, one word at a time, so that only 8 * ROWS weights
// are live (converting all 32 of a step first, for reuse across the batch, spills).
#pragma once
#include <cuda_bf16.h>

#ifndef WARPS
#define WARPS 4
#endif
#ifndef ROWS
#define ROWS 1
#endif
#ifndef DEQUANT_MAGIC
#define DEQUANT_MAGIC 0
#endif
// the batch tile: ROWS * MAX_MT FP32 accumulators a lane
#ifndef MAX_MT
#define MAX_MT (ROWS >= 4 ? 4 : 32)
#endif
// blocks an SM must hold (__launch_bounds__): caps the registers, so that the M = 1 walk,
// which needs bytes in flight more than registers, keeps 16 warps an SM
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (16 / WARPS)
#endif

__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// q - 8 of nibble J of word q, as a float.
template <int J>
__device__ __forceinline__ float nib(unsigned q)
{
#if DEQUANT_MAGIC
  // 2^23 + n as a float's bits: OR the nibble into the mantissa of 8388608.0f, then one FADD
  // takes 2^23 + 8 away: exact, and no integer-to-float conversion (I2F runs at a quarter of
  // the FP32 rate on Hopper)
  return __uint_as_float(0x4B000000u | ((q >> (4 * J)) & 15u)) - 8388616.0f;
#else
  return __int2float_rn((int)((q >> (4 * J)) & 15u) - 8);
#endif
}

// word I (0..3) of a 16-byte load
template <int I>
__device__ __forceinline__ unsigned word(uint4 v)
{
  return I == 0 ? v.x : I == 1 ? v.y : I == 2 ? v.z : v.w;
}

// acc + the dot product of 8 weights (already scaled, FP32) with 8 bf16 of x (16 bytes)
__device__ __forceinline__ float dot8(const float* w, uint4 xv, float acc)
{
  acc = fmaf(w[0], bf_lo(xv.x), acc);
  acc = fmaf(w[1], bf_hi(xv.x), acc);
  acc = fmaf(w[2], bf_lo(xv.y), acc);
  acc = fmaf(w[3], bf_hi(xv.y), acc);
  acc = fmaf(w[4], bf_lo(xv.z), acc);
  acc = fmaf(w[5], bf_hi(xv.z), acc);
  acc = fmaf(w[6], bf_lo(xv.w), acc);
  acc = fmaf(w[7], bf_hi(xv.w), acc);
  return acc;
}

// one word of each of the ROWS rows: its 8 weights dequantized once ((q - 8) * scale, FP32),
// then used by every batch row; x's 16 bytes at those k loaded once a batch row
template <int I, int MT>
__device__ __forceinline__ void word_step(const uint4 (&w)[ROWS], const float (&s)[ROWS],
                                          float (&acc)[ROWS][MT], int M, int m0,
                                          const uint4* __restrict__ xrow, size_t xstride)
{
  float wf[ROWS][8];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const unsigned q = word<I>(w[r]);
    wf[r][0] = nib<0>(q) * s[r];
    wf[r][1] = nib<1>(q) * s[r];
    wf[r][2] = nib<2>(q) * s[r];
    wf[r][3] = nib<3>(q) * s[r];
    wf[r][4] = nib<4>(q) * s[r];
    wf[r][5] = nib<5>(q) * s[r];
    wf[r][6] = nib<6>(q) * s[r];
    wf[r][7] = nib<7>(q) * s[r];
  }
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m0 + m >= M) break;  // the same for every lane
    const uint4 xv = __ldg(xrow + m * xstride + I);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r][m] = dot8(wf[r], xv, acc[r][m]);
  }
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// y[m0 + m][n0 + r] for m < MT (and m0 + m < M), r < ROWS (and n0 + r < N)
template <int MT>
__device__ __forceinline__ void w4_rows(int M, int N, int K, int n0, int m0, int lane,
                                        const __nv_bfloat16* __restrict__ x,
                                        const unsigned* __restrict__ Wq,
                                        const __nv_bfloat16* __restrict__ S,
                                        __nv_bfloat16* __restrict__ y)
{
  float acc[ROWS][MT];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;
  const int steps = K / 32, groups = K / 128;
  for (int c = lane; c < steps; c += 32) {
    uint4 w[ROWS];
    float s[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const bool in = n0 + r < N;
      // W is read once: streaming loads (ld.global.cs) keep it from evicting x
      w[r] = in ? __ldcs(reinterpret_cast<const uint4*>(Wq + (size_t)(n0 + r) * (K / 8)) + c)
                : make_uint4(0, 0, 0, 0);
      s[r] = in ? __bfloat162float(S[(size_t)(n0 + r) * groups + c / 4]) : 0.0f;
    }
    // x's 64 bytes at this step's k, batch row m0 + m at xrow + m * xstride (in uint4)
    const uint4* xrow = reinterpret_cast<const uint4*>(x + (size_t)m0 * K) + 4 * c;
    const size_t xstride = (size_t)K / 8;
    word_step<0, MT>(w, s, acc, M, m0, xrow, xstride);
    word_step<1, MT>(w, s, acc, M, m0, xrow, xstride);
    word_step<2, MT>(w, s, acc, M, m0, xrow, xstride);
    word_step<3, MT>(w, s, acc, M, m0, xrow, xstride);
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float v = warp_sum(acc[r][m]);
      if (lane == (r * MT + m) % 32 && m0 + m < M && n0 + r < N)
        y[(size_t)(m0 + m) * N + n0 + r] = __float2bfloat16_rn(v);
    }
}

// a warp's ROWS rows of y for every batch row: the batch tile picked from M at run time (a
// uniform switch, one instantiation each), M past MAX_MT in chunks of it
__device__ __forceinline__ void w4_warp(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                                        const unsigned* __restrict__ Wq,
                                        const __nv_bfloat16* __restrict__ S,
                                        __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  if (n0 >= N) return;  // the whole warp
  if (M <= 1) w4_rows<1>(M, N, K, n0, 0, lane, x, Wq, S, y);
  else if (M <= 2) w4_rows<2>(M, N, K, n0, 0, lane, x, Wq, S, y);
  else if (M <= 4) w4_rows<4>(M, N, K, n0, 0, lane, x, Wq, S, y);
  else if (MAX_MT >= 8 && M <= 8)
    w4_rows<(MAX_MT >= 8 ? 8 : 1)>(M, N, K, n0, 0, lane, x, Wq, S, y);
  else
    for (int m0 = 0; m0 < M; m0 += MAX_MT) w4_rows<MAX_MT>(M, N, K, n0, m0, lane, x, Wq, S, y);
}

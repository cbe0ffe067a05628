// What the tensor-core w4a16 steps (04, 05) share: one scale group of a 16-row tile of W
// dequantized into mma.sync A fragments and multiplied with x's batch rows.
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
//
// A warp owns 16 rows of W (one m16 tile: W is the mma's A operand, x its B operand with 8
// batch rows an n8 tile, zeros past M). A lane holds 16 bytes (32 weights) of rows g and
// g + 8 of the tile per scale group (g = lane / 4; the 4 lanes of a row read its whole
// group of 128 weights). Nibbles s and s + 4 of a word become a bf16 pair with
// ((q >> 4s) & 0x000F000F) | 0x43004300 (128 + n, exact) and one sub.bf16x2 of 136: q - 8
// exactly. That register is the A fragment's (k, k + 1) for this lane: a permutation of K,
// the same for x (whose pairs a PRMT builds from its 16-byte loads), so the dot products
// are unchanged. The mmas of a group sum exact integers times x in FP32; the group's scale
// multiplies the 16 x 8 tile once (4 FMAs a lane), not every weight.
#pragma once
#include "../common/mma.cuh"

// The kernel's dynamic shared memory as float* NAME (extern __shared__; under the tests' CPU
// emulator, its own buffer)
#ifdef KERNELBOOK_EMU
#define DYNAMIC_SMEM_FLOATS(name) float* name = reinterpret_cast<float*>(emu_dynamic_smem)
#else
#define DYNAMIC_SMEM_FLOATS(name) extern __shared__ float name[]
#endif

// W4_FUSED_LOP3 (06): nib_pair's mask-and-OR as one lop3.b32 with both constants in registers;
// C's (q & a) | b with two immediates compiles to two LOP3s (one immediate an instruction)
#ifndef W4_FUSED_LOP3
#define W4_FUSED_LOP3 0
#endif

// (a & b) | c, one LOP3 (lut 0xEA = (0xF0 & 0xCC) | 0xAA)
__device__ __forceinline__ unsigned and_or(unsigned a, unsigned b, unsigned c)
{
#ifdef KERNELBOOK_EMU
  return (a & b) | c;
#else
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#endif
}

// nibbles S_ and S_ + 4 of word q, minus 8, as two bf16 (nibble S_ in the low half): exact
template <int S_>
__device__ __forceinline__ unsigned nib_pair(unsigned q)
{
#if W4_FUSED_LOP3
  const unsigned v = and_or(q >> (4 * S_), 0x000F000Fu, 0x43004300u);  // 128 + n, twice
#else
  const unsigned v = ((q >> (4 * S_)) & 0x000F000Fu) | 0x43004300u;  // 128 + n, twice
#endif
  return bf16x2_sub(v, 0x43084308u);  // - 136, twice
}

// x's elements S_ and S_ + 4 of 8 consecutive bf16 (a 16-byte load), in nib_pair's order
template <int S_>
__device__ __forceinline__ unsigned x_pair(uint4 v)
{
  const unsigned lo = S_ < 2 ? v.x : v.y, hi = S_ < 2 ? v.z : v.w;
  return __byte_perm(lo, hi, S_ % 2 == 0 ? 0x5410 : 0x7632);
}

// acc[j] += the scaled products of scale group gi (qa, qb: this lane's 16 bytes of rows g
// and g + 8; sa, sb: their scales) with batch rows m0 + 8 j + g of x, j < MT. A word's 8
// weights become A fragments once, for every batch tile, and only one word's are live.
template <int MT>
__device__ __forceinline__ void w4_group_mma(float (&acc)[MT][4], uint4 qa, uint4 qb, float sa,
                                             float sb, int gi, int M, int K, int m0,
                                             const __nv_bfloat16* __restrict__ x)
{
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float c[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const unsigned ua = w == 0 ? qa.x : w == 1 ? qa.y : w == 2 ? qa.z : qa.w;
    const unsigned ub = w == 0 ? qb.x : w == 1 ? qb.y : w == 2 ? qb.z : qb.w;
    // [pair of the word's two k-steps][fragment register]
    const unsigned a[2][4] = {{nib_pair<0>(ua), nib_pair<0>(ub), nib_pair<1>(ua), nib_pair<1>(ub)},
                              {nib_pair<2>(ua), nib_pair<2>(ub), nib_pair<3>(ua), nib_pair<3>(ub)}};
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const int m = m0 + 8 * j + g;  // this lane's batch row of the B fragment
      const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)m * K + gi * 128 + 32 * t);
      const uint4 xv = m < M ? __ldg(xr + w) : zero;
      mma_bf16(c[j], a[0][0], a[0][1], a[0][2], a[0][3], x_pair<0>(xv), x_pair<1>(xv));
      mma_bf16(c[j], a[1][0], a[1][1], a[1][2], a[1][3], x_pair<2>(xv), x_pair<3>(xv));
    }
  }
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    acc[j][0] = fmaf(sa, c[j][0], acc[j][0]);  // rows g, g + 8: their group's scale
    acc[j][1] = fmaf(sa, c[j][1], acc[j][1]);
    acc[j][2] = fmaf(sb, c[j][2], acc[j][2]);
    acc[j][3] = fmaf(sb, c[j][3], acc[j][3]);
  }
}

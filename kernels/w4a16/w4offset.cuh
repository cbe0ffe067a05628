// What the zero-point-in-the-mma steps (09, 10) share: one scale group of a 16-row tile of W
// multiplied with x's batch rows, the weights going to the mma as 128 + q and the zero point
// (-136 times x) an mma of its own with a constant A, so that no bf16x2 subtraction is left.
// sum (128 + q) x - 136 sum x = sum (q - 8) x; both are FP32 sums of exact bf16 products.
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
#pragma once
#define W4_FUSED_LOP3 1
#include "w4mma.cuh"

// 16 bytes of W (or Wt), through L2 only (W is read once): L1 keeps x
__device__ __forceinline__ uint4 load_w(const uint4* p)
{
#ifdef KERNELBOOK_EMU
  return *p;
#else
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
#endif
}

// nibbles S_ and S_ + 4 of word q as two bf16 128 + n (nibble S_ in the low half): exact
template <int S_>
__device__ __forceinline__ unsigned nib_biased(unsigned q)
{
  return and_or(q >> (4 * S_), 0x000F000Fu, 0x43004300u);
}

constexpr unsigned MINUS_136 = 0xC308C308u;  // -136, twice: the A fragment of the zero point

// acc[j] += the scaled products of scale group gi with batch rows m0 + 8 j + g of x, as
// w4_group_mma, the weights 128 + q and the zero point an mma of its own
template <int MT>
__device__ __forceinline__ void w4_group_offset(float (&acc)[MT][4], uint4 qa, uint4 qb, float sa,
                                                float sb, int gi, int M, int K, int m0,
                                                const __nv_bfloat16* __restrict__ x)
{
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // c: the weights' products; d: the zero point's (-136 sum x, the same in rows g and g + 8),
  // two independent chains of mmas
  float c[MT][4], d[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) c[j][r] = d[j][r] = 0.0f;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const unsigned ua = w == 0 ? qa.x : w == 1 ? qa.y : w == 2 ? qa.z : qa.w;
    const unsigned ub = w == 0 ? qb.x : w == 1 ? qb.y : w == 2 ? qb.z : qb.w;
    const unsigned a[2][4] = {
        {nib_biased<0>(ua), nib_biased<0>(ub), nib_biased<1>(ua), nib_biased<1>(ub)},
        {nib_biased<2>(ua), nib_biased<2>(ub), nib_biased<3>(ua), nib_biased<3>(ub)}};
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const int m = m0 + 8 * j + g;  // this lane's batch row of the B fragment
      const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)m * K + gi * 128 + 32 * t);
      const uint4 xv = m < M ? __ldg(xr + w) : zero;
      const unsigned b0 = x_pair<0>(xv), b1 = x_pair<1>(xv), b2 = x_pair<2>(xv),
                     b3 = x_pair<3>(xv);
      mma_bf16(c[j], a[0][0], a[0][1], a[0][2], a[0][3], b0, b1);
      mma_bf16(d[j], MINUS_136, MINUS_136, MINUS_136, MINUS_136, b0, b1);
      mma_bf16(c[j], a[1][0], a[1][1], a[1][2], a[1][3], b2, b3);
      mma_bf16(d[j], MINUS_136, MINUS_136, MINUS_136, MINUS_136, b2, b3);
    }
  }
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    acc[j][0] = fmaf(sa, c[j][0] + d[j][0], acc[j][0]);  // rows g, g + 8: their group's scale
    acc[j][1] = fmaf(sa, c[j][1] + d[j][1], acc[j][1]);
    acc[j][2] = fmaf(sb, c[j][2] + d[j][2], acc[j][2]);
    acc[j][3] = fmaf(sb, c[j][3] + d[j][3], acc[j][3]);
  }
}

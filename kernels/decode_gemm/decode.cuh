// What the decode_gemm steps share: bf16 arithmetic on 16-byte vectors, and the warp's
// sum. Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
#pragma once
#include <cuda_bf16.h>

// bf16 pairs in a 32-bit word: the low half is element 2i, the high half 2i + 1
__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// acc + the dot product of 8 bf16 pairs (a 16-byte load of each side), FP32 FMAs in order
__device__ __forceinline__ float dot8(uint4 a, uint4 b, float acc)
{
  acc = fmaf(bf_lo(a.x), bf_lo(b.x), acc);
  acc = fmaf(bf_hi(a.x), bf_hi(b.x), acc);
  acc = fmaf(bf_lo(a.y), bf_lo(b.y), acc);
  acc = fmaf(bf_hi(a.y), bf_hi(b.y), acc);
  acc = fmaf(bf_lo(a.z), bf_lo(b.z), acc);
  acc = fmaf(bf_hi(a.z), bf_hi(b.z), acc);
  acc = fmaf(bf_lo(a.w), bf_lo(b.w), acc);
  acc = fmaf(bf_hi(a.w), bf_hi(b.w), acc);
  return acc;
}

// the sum over the warp's 32 lanes, in every lane (5 butterfly shuffles)
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 16 bytes of W, read through L2 only (ld.global.nc.L1::no_allocate): L1 keeps x (08, 09)
__device__ __forceinline__ uint4 load_w(const uint4* p)
{
#ifdef KERNELBOOK_EMU
  return *p;
#else
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#endif
}

// y's rows [r0, r1) for every batch row, a row at a time by one warp: 16-byte steps a lane
// where rows are 16-byte aligned (K % 8 == 0), else one element a lane a step. The path
// 09 and 10 take where K does not fit their streams (odd K, or rows not whole runs/slots).
__device__ __forceinline__ void rows_one_at_a_time(int M, int N, int K, int r0, int r1,
                                                   const __nv_bfloat16* __restrict__ x,
                                                   const __nv_bfloat16* __restrict__ W,
                                                   __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32;
  for (int r = r0; r < r1; ++r)
    for (int m = 0; m < M; ++m) {
      float acc = 0.0f;
      if (K % 8 == 0) {
        const uint4* w4 = reinterpret_cast<const uint4*>(W + (size_t)r * K);
        const uint4* x4 = reinterpret_cast<const uint4*>(x + (size_t)m * K);
#pragma unroll 1
        for (int c = lane; c < K / 8; c += 32) acc = dot8(load_w(w4 + c), __ldg(x4 + c), acc);
      } else {
#pragma unroll 1
        for (int k = lane; k < K; k += 32)
          acc = fmaf(__bfloat162float(W[(size_t)r * K + k]), __bfloat162float(x[(size_t)m * K + k]),
                     acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) y[(size_t)m * N + r] = __float2bfloat16_rn(acc);
    }
}

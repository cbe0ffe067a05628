// The BF16 tensor-core instruction the SIMT-framed steps use (decode_gemm 06, w4a16 04), and
// the bf16x2 subtraction, each inline PTX behind a helper: the CPU emulator of the tests
// (tests/cuda_emu.py) defines KERNELBOOK_EMU and supplies its own versions.
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
#pragma once
#include <cuda_bf16.h>

// d += A B, mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (g = lane / 4, t = lane % 4):
// a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9];
// b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]; d = C[g][2t, 2t+1], C[g+8][2t, 2t+1]
__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1)
{
#ifdef KERNELBOOK_EMU
  emu_mma_m16n8k16_bf16(d, a0, a1, a2, a3, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// a - b on two bf16 at once (sub.rn.bf16x2)
__device__ __forceinline__ unsigned bf16x2_sub(unsigned a, unsigned b)
{
#ifdef KERNELBOOK_EMU
  return emu_bf16x2_sub(a, b);
#else
  unsigned r;
  asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#endif
}

// The block's WARPS_ warps' MT accumulator tiles (16 rows of W by 8 batch rows each, the C
// fragment's registers) added through shared memory; warp 0 stores y[m][n] in bf16 for
// n = n0 + g, n0 + g + 8 and m = m0 + 8 j + 2t, + 1, inside M x N. Ends with the block in step
// (part is free again).
template <int WARPS_, int MT>
__device__ __forceinline__ void sum_warps_store(float (&part)[WARPS_][4][4][32],
                                                const float (&acc)[MT][4], int M, int N, int m0,
                                                int n0, __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) part[warp][j][r][lane] = acc[j][r];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int w = 0; w < WARPS_; ++w)
#pragma unroll
        for (int r = 0; r < 4; ++r) s[r] += part[w][j][r][lane];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int n = n0 + g + (r < 2 ? 0 : 8), m = m0 + 8 * j + 2 * t + r % 2;
        if (n < N && m < M) y[(size_t)m * N + n] = __float2bfloat16_rn(s[r]);
      }
    }
  }
  __syncthreads();
}

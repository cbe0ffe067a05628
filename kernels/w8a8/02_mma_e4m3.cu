// 02_mma_e4m3: the products on the FP8 tensor cores (mma.sync m16n8k32 e4m3, FP32 accumulate),
// K split over the warps of a block.
//
// Changed from 01: a warp computes a 16 x 8 tile of y (16 batch rows of x, 8 rows of W) per
// mma, NT such tiles side by side, with x and W's bytes fed to the tensor cores as they are
// (no decode at all). Each 64 bytes of K is two mmas: a lane loads 16 contiguous bytes of its
// W row (lane / 4 picks the row, lane % 4 the 16 bytes) and the same 16 bytes of its two
// batch rows (lane / 4 and lane / 4 + 8), and hands them to the mma as if they were the
// fragment's k = 4t..4t+3 and 16+4t..: a permutation of K, the same for x and W, so the dot
// products are unchanged and every load is 16 bytes wide. The WARPS warps of a block take
// interleaved 64-byte chunks of K and add their partial tiles through shared memory at the
// end, so a block of 8 * NT rows has WARPS loads in flight per lane step.
// Hypothesis: at M = 16 01 is issue-bound (16 FMAs and a decode per weight); here a weight
// costs 1/32 of an mma instruction, so M = 16 reads W at HBM speed like M = 1 does: expect
// >= 85 % of the read ceiling at both headlines, and faster than torch._scaled_mm at M = 16
// (cuBLASLt's FP8 GEMM tiles are built for large M). At M <= 8 half of each mma's rows are
// zeros: free, since the tensor cores are idle anyway.
// On sm_90 ptxas lowers mma.sync's e4m3 shape to conversions and HMMA.16816.F32 (two a
// k32 mma: Hopper's native FP8 tensor path is wgmma); the cost per weight stays a small
// fraction of 01's.
// What ncu should show: the tensor pipe lightly used, dram__throughput near peak at M = 16,
// long-scoreboard stalls the largest.
//
// Sizes: any M (16-row tiles of x, W walked once a tile), N; K a multiple of 16 (a lane's
// 16 bytes are all inside K or all past it). Launch: grid (cdiv(N, 8 * NT)), block
// (32 * WARPS), static shared memory WARPS * NT * 4 * 32 floats.
#include <cuda_bf16.h>

#ifndef WARPS
#define WARPS 4
#endif
#ifndef NT
#define NT 2
#endif
#ifndef UNR
#define UNR 1  // chunks of K a warp loads before using any (03 tunes it)
#endif

__device__ __forceinline__ void mma_e4m3(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1)
{
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
w8_mma_e4m3(int M, int N, int K, const unsigned char* __restrict__ xq,
            const float* __restrict__ sx, const unsigned char* __restrict__ Wq,
            const float* __restrict__ sw, __nv_bfloat16* __restrict__ y)
{
  __shared__ float part[WARPS][NT][4][32];  // each warp's accumulators, lane-major
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * 8 * NT;
  const int chunks = (K + 63) / 64;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int m0 = 0; m0 < M; m0 += 16) {
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const int ra = m0 + g, rb = m0 + g + 8;
    for (int c0 = warp; c0 < chunks; c0 += WARPS * UNR) {
      uint4 xa[UNR], xb[UNR], w[UNR][NT];  // UNR chunks' loads issued before any is used
#pragma unroll
      for (int u = 0; u < UNR; ++u) {
        const int k = (c0 + u * WARPS) * 64 + 16 * t;
        const bool kin = k < K;  // false for a chunk past the last, too
        xa[u] = kin && ra < M ? __ldg(reinterpret_cast<const uint4*>(xq + (size_t)ra * K + k)) : zero;
        xb[u] = kin && rb < M ? __ldg(reinterpret_cast<const uint4*>(xq + (size_t)rb * K + k)) : zero;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int n = n0 + 8 * j + g;
          w[u][j] = kin && n < N ? __ldcs(reinterpret_cast<const uint4*>(Wq + (size_t)n * K + k)) : zero;
        }
      }
#pragma unroll
      for (int u = 0; u < UNR; ++u)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          mma_e4m3(acc[j], xa[u].x, xb[u].x, xa[u].y, xb[u].y, w[u][j].x, w[u][j].y);
          mma_e4m3(acc[j], xa[u].z, xb[u].z, xa[u].w, xb[u].w, w[u][j].z, w[u][j].w);
        }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) part[warp][j][r][lane] = acc[j][r];
    __syncthreads();
    // warp 0 adds the WARPS partial tiles and writes them: accumulator r of lane (g, t) is
    // y[m0 + g + 8 * (r / 2)][n0 + 8 j + 2 t + r % 2]
    if (warp == 0) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          float s = 0.0f;
#pragma unroll
          for (int w = 0; w < WARPS; ++w) s += part[w][j][r][lane];
          const int m = m0 + g + 8 * (r / 2), n = n0 + 8 * j + 2 * t + r % 2;
          if (m < M && n < N) y[(size_t)m * N + n] = __float2bfloat16_rn(s * sx[m] * sw[n]);
        }
    }
    __syncthreads();
  }
}

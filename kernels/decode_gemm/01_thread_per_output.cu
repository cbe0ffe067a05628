// 01_thread_per_output: the floor of the decode chapter. y = x * W^T for a small batch, BF16
// in and out, FP32 accumulation: x (M x K), W (N x K) and y (M x N), all row-major (the hgemm
// problem's ABI: A = x, B = W, C = y).
//
// What it is: one thread per element y[m][n], a plain loop over k reading one BF16 of x and
// one of W a step. Threads of a block are consecutive n of one batch row m (grid.y = M), so a
// warp reads the same x element (a broadcast) and 32 different rows of W, K * 2 bytes apart:
// every W load of a warp touches 32 sectors and uses 2 bytes of each. The sectors stay in L1
// for the next 15 steps only if 32 rows' worth of lines survive there; with a block's 8 warps
// and other blocks' rows competing, many are evicted and fetched again from L2. W is also
// read once per batch row (M times), from L2 if it is still there, else from HBM.
// Why it is the floor: decode is memory-bound (2 FLOP a W element, ~1 a byte at M = 1), so
// the figure that matters is W's bytes a second against HBM's ~4.8 TB/s; this kernel issues
// 32 load instructions a 2 bytes each for every 64 bytes of W it uses, and loses sectors.
// Expect ~15 % of cuBLAS at the headline (M = 1, N = 14336, K = 4096).
// What ncu should show: l1tex__t_sectors_pipe_lsu_mem_global_op_ld far above the 2 * N * K / 32
// sectors W holds, a low L1 hit rate, lts__t_sectors well above dram__sectors_read (W sectors
// fetched more than once), dram__throughput far below peak, stalls on long scoreboard.
//
// Sizes: any M, N and K (no vector loads, no alignment assumed).
// Launch: grid (cdiv(N, BLOCK), M), block (BLOCK), no shared memory.
// Indices: n * K and m * K in 64 bits (N * K reaches 5.3e8 in the study, below 2^31, but the
// product is cheap to widen).

#include <cuda_bf16.h>

#ifndef BLOCK
#define BLOCK 256
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
decode_thread_per_output(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                         const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ y)
{
  const int n = blockIdx.x * BLOCK + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  const __nv_bfloat16* xr = x + (size_t)m * K;
  const __nv_bfloat16* wr = W + (size_t)n * K;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += __bfloat162float(xr[k]) * __bfloat162float(wr[k]);
  y[(size_t)m * N + n] = __float2bfloat16_rn(acc);
}

// 00 copy: out = in, same shape. The ceiling of the transpose ladder (computes: copy).
//
// What it is: the same bytes as a transpose (M*N floats read, M*N written) with none of its
// difficulty: consecutive threads read and write consecutive 16-byte words, so every warp
// access is four full 128-byte lines. Each thread has UNROLL float4 loads in flight before
// its first store (BLOCK * UNROLL * 16 bytes per block), enough to cover DRAM latency.
// Why it is here: the bench times a cudaMemcpy device-to-device of the same bytes beside it;
// this kernel shows how close a plain kernel gets to that (expect 95-100 % of it), and the
// transpose variants are read against both.
// What ncu should show: dram__bytes_read.sum and dram__bytes_write.sum each ~M*N*4 (at sizes
// beyond L2), 4 sectors per request for loads and stores (LDG.E.128 / STG.E.128), DRAM
// throughput near its peak, warps stalled on long scoreboard (memory) and little else.
// Launch: block (BLOCK), grid (cdiv(M * N, 4 * BLOCK * UNROLL)). Any M, N: the float4 part
// covers the first 4 * floor(M*N / 4) elements (buffers are 256-B aligned), block 0 copies the
// last M*N % 4 with scalar accesses.

#ifndef BLOCK
#error "BLOCK (threads per block) must be defined"
#endif
#ifndef UNROLL
#error "UNROLL (float4 per thread) must be defined"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
transpose_copy(int M, int N, const float* __restrict__ in, float* __restrict__ out) {
  const size_t n = (size_t)M * N;
  const size_t n4 = n / 4;
  const float4* __restrict__ in4 = reinterpret_cast<const float4*>(in);
  float4* __restrict__ out4 = reinterpret_cast<float4*>(out);
  const size_t base = (size_t)blockIdx.x * (BLOCK * UNROLL) + threadIdx.x;
  float4 v[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const size_t i = base + (size_t)u * BLOCK;
    if (i < n4) v[u] = in4[i];
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const size_t i = base + (size_t)u * BLOCK;
    if (i < n4) out4[i] = v[u];
  }
  if (blockIdx.x == 0 && threadIdx.x < n - 4 * n4) out[4 * n4 + threadIdx.x] = in[4 * n4 + threadIdx.x];
}

// 02 global-memory coalescing: same work per thread as 01, threads re-mapped so that
// consecutive threads of a warp take consecutive COLUMNS of C.
//
// Why it should help: at each step of the k loop a warp now reads 32 consecutive floats of
// B (one 128-byte line, 4 sectors) and writes 32 consecutive floats of C, while A[row][k] is
// one broadcast address. The loads of 01 that needed 32 sectors need 4, so the kernel moves
// from latency/sector bound towards L1/L2 bandwidth. Expect ~8-12 % of cuBLAS; ncu's
// sectors per request for global loads drops from ~32 (01) to ~4.
// Launch: 1-D block of BS*BS threads, grid (cdiv(N, BS), cdiv(M, BS)). Any M, N, K.

#ifndef BS
#error "BS (block side) must be defined"
#endif

extern "C" __global__ void sgemm_coalescing(int M, int N, int K, float alpha,
                                            const float* __restrict__ A, const float* __restrict__ B,
                                            float beta, float* __restrict__ C) {
  const int row = blockIdx.y * BS + threadIdx.x / BS;
  const int col = blockIdx.x * BS + threadIdx.x % BS;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = alpha * acc + beta * C[(size_t)row * N + col];
  }
}

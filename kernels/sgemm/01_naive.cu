// 01 naive: one thread per element of C, thread x mapped to a ROW of C.
//
// What it is: the textbook triple loop, one output per thread. Consecutive threads of a
// warp (threadIdx.x) take consecutive rows, so at each step of the k loop the warp reads 32
// elements of A that lie K floats apart and writes 32 elements of C that lie N floats apart:
// every access is its own 32-byte sector. B[k][col] is the same address for the whole warp
// (a broadcast). Expect ~1 % of cuBLAS; ncu shows ~32 sectors per request for the A loads
// and C stores, and DRAM/L2 traffic far above the minimum.
// Launch: block (BS, BS), grid (cdiv(M, BS), cdiv(N, BS)). Any M, N, K.

#ifndef BS
#error "BS (block side) must be defined"
#endif

extern "C" __global__ void sgemm_naive(int M, int N, int K, float alpha, const float* __restrict__ A,
                                       const float* __restrict__ B, float beta, float* __restrict__ C) {
  const int row = blockIdx.x * BS + threadIdx.x;
  const int col = blockIdx.y * BS + threadIdx.y;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = alpha * acc + beta * C[(size_t)row * N + col];
  }
}

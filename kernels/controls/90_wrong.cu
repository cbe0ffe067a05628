// Negative control: a GEMM with an off-by-one k loop (the last k is never added).
// The bench must reject it with a relative error far over the tolerance (~1/sqrt(K)).
extern "C" __global__ void control_wrong(int M, int N, int K, float alpha, const float* __restrict__ A,
                                         const float* __restrict__ B, float beta, float* __restrict__ C) {
  const int row = blockIdx.y * 32 + threadIdx.x / 32;
  const int col = blockIdx.x * 32 + threadIdx.x % 32;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K - 1; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = alpha * acc + beta * C[(size_t)row * N + col];
  }
}

// Negative control: a correct GEMM whose last thread also writes 17 floats past the end of
// C, inside the allocation's guard band (no fault). The bench's guard check must catch it;
// compute-sanitizer memcheck would too on an exact-size allocation.
extern "C" __global__ void control_oob(int M, int N, int K, float alpha, const float* __restrict__ A,
                                       const float* __restrict__ B, float beta, float* __restrict__ C) {
  const int row = blockIdx.y * 32 + threadIdx.x / 32;
  const int col = blockIdx.x * 32 + threadIdx.x % 32;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = alpha * acc + beta * C[(size_t)row * N + col];
    if (row == M - 1 && col == N - 1) C[(size_t)M * N + 16] = acc;
  }
}

// Negative control: a correct GEMM except that one element of C is written as NaN.
// The bench must reject it as non-finite, naming how many elements are NaN or Inf.
extern "C" __global__ void control_nan(int M, int N, int K, float alpha, const float* __restrict__ A,
                                       const float* __restrict__ B, float beta, float* __restrict__ C) {
  const int row = blockIdx.y * 32 + threadIdx.x / 32;
  const int col = blockIdx.x * 32 + threadIdx.x % 32;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    float out = alpha * acc + beta * C[(size_t)row * N + col];
    if (row == M / 2 && col == N / 3) out = __int_as_float(0x7fc00000);
    C[(size_t)row * N + col] = out;
  }
}

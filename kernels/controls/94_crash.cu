// Negative control: writes through a wild pointer far outside any allocation, which faults
// (illegal address). The bench must report a crash naming the variant and size, and the
// other jobs must go on.
extern "C" __global__ void control_crash(int M, int N, int K, float alpha, const float* __restrict__ A,
                                         const float* __restrict__ B, float beta, float* __restrict__ C) {
  const int row = blockIdx.y * 32 + threadIdx.x / 32;
  const int col = blockIdx.x * 32 + threadIdx.x % 32;
  if (row == 0 && col == 0) C[(size_t)1 << 40] = 1.0f;
}

// Negative control: a misaligned 4-byte store (one byte into C), which the hardware
// rejects (misaligned address): the launch fails and the CUDA context is lost. The bench
// must report a crash naming the variant and size, and the other jobs must go on.
extern "C" __global__ void control_crash(int M, int N, int K, float alpha, const float* __restrict__ A,
                                         const float* __restrict__ B, float beta, float* __restrict__ C) {
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    float* misaligned = reinterpret_cast<float*>(reinterpret_cast<char*>(C) + 1);
    *misaligned = alpha;
  }
}

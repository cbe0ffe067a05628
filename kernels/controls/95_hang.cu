// Negative control: never finishes (spins on a flag nothing sets). The bench must give up
// after timing.launch_timeout_s with a message that says so, and the other jobs go on.
extern "C" __global__ void control_hang(int M, int N, int K, float alpha, const float* __restrict__ A,
                                        const float* __restrict__ B, float beta, float* __restrict__ C) {
  volatile const float* flag = A;
  while (true) {
    if (flag[0] == 12345.678f) break;  // a volatile read the compiler cannot drop
    __nanosleep(1000);
  }
}

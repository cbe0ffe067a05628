// Negative control: shared-memory tiling with the barrier after the tile loads missing, so
// threads read tile elements other threads may not have written yet (a read-after-write
// race), and the barrier before the next overwrite missing too (write-after-read).
// Its result may even come out right; compute-sanitizer racecheck must flag it.
#define TS 32
extern "C" __global__ void control_race(int M, int N, int K, float alpha, const float* __restrict__ A,
                                        const float* __restrict__ B, float beta, float* __restrict__ C) {
  __shared__ float As[TS][TS];
  __shared__ float Bs[TS][TS];
  const int tr = threadIdx.x / TS, tc = threadIdx.x % TS;
  const int row = blockIdx.y * TS + tr, col = blockIdx.x * TS + tc;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TS) {
    As[tr][tc] = (row < M && k0 + tc < K) ? A[(size_t)row * K + k0 + tc] : 0.0f;
    Bs[tr][tc] = (k0 + tr < K && col < N) ? B[(size_t)(k0 + tr) * N + col] : 0.0f;
    // missing __syncthreads()
    for (int k = 0; k < TS; ++k) acc += As[tr][k] * Bs[k][tc];
    // missing __syncthreads()
  }
  if (row < M && col < N) C[(size_t)row * N + col] = alpha * acc + beta * C[(size_t)row * N + col];
}

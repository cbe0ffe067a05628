// 03 warp_shuffle: 02 with its reductions done by warp shuffles.
//
// Changed from 02: a reduction is 5 __shfl_xor_sync steps inside each warp (no shared memory,
// no barrier), then, only when a row has more than one warp, one value per warp through a
// 32-float shared array and two barriers. A warp-per-row block (short rows) needs no barrier
// at all. Same geometry, same three passes over x.
// Why it should help: 02 pays log2(blockDim.x) + 2 barriers and as many shared round trips per
// reduction, two reductions per row; at short rows (128-1024 elements, a few elements per
// thread) that is a large share of the time. At long rows the reduction is a small part of
// the work and this changes little.
// Expect ~47 % of copy at 4096 x 65536 float32, and a clear gain over 02 at N <= 1024.
// What ncu should show: against 02, far fewer barrier stalls and shared-memory instructions
// (smsp__inst_executed_op_shared_ld/st) at short rows; global traffic unchanged.
// Launch: block (GX, GY), grid (cdiv(R, GY)); GX % 32 == 0, GX * GY <= 1024. Any R, N.
// Define DTYPE_F32 or DTYPE_BF16.

#if defined(DTYPE_F32) == defined(DTYPE_BF16)
#error "define exactly one of DTYPE_F32 and DTYPE_BF16"
#endif

#ifdef DTYPE_BF16
#include <cuda_bf16.h>
typedef __nv_bfloat16 T;
__device__ __forceinline__ float to_f(T v) { return __bfloat162float(v); }
__device__ __forceinline__ T from_f(float v) { return __float2bfloat16_rn(v); }
#else
typedef float T;
__device__ __forceinline__ float to_f(T v) { return v; }
__device__ __forceinline__ T from_f(float v) { return v; }
#endif

#define LOG2E 1.4426950408889634f

struct Max {
  __device__ __forceinline__ static float apply(float a, float b) { return fmaxf(a, b); }
};
struct Sum {
  __device__ __forceinline__ static float apply(float a, float b) { return a + b; }
};

template <class Op>
__device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduce v over the blockDim.x threads of this row. blockDim.x % 32 == 0, so no warp spans two
// rows; red[] holds one float per warp of the block (at most 32).
template <class Op>
__device__ __forceinline__ float row_reduce(float v, float* red) {
  v = warp_reduce<Op>(v);
  if (blockDim.x == 32) return v;  // a warp per row: done, no barrier (uniform branch)
  const int nw = blockDim.x / 32;
  float* r = red + threadIdx.y * nw;
  __syncthreads();  // the previous reduction's readers are done with red[]
  if (threadIdx.x % 32 == 0) r[threadIdx.x / 32] = v;
  __syncthreads();
  float out = r[0];
  for (int w = 1; w < nw; ++w) out = Op::apply(out, r[w]);
  return out;
}

extern "C" __global__ void __launch_bounds__(1024)
softmax_warp_shuffle(int R, int N, const T* __restrict__ x, T* __restrict__ y) {
  __shared__ float red[32];
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const bool active = row < R;  // inactive threads still take part in shuffles and barriers
  const int tx = threadIdx.x, nt = blockDim.x;
  const T* xr = x + (size_t)row * N;
  T* yr = y + (size_t)row * N;

  float m = -INFINITY;
  if (active)
    for (int j = tx; j < N; j += nt) m = fmaxf(m, to_f(xr[j]));
  m = row_reduce<Max>(m, red) * LOG2E;

  float s = 0.0f;
  if (active)
    for (int j = tx; j < N; j += nt) s += exp2f(fmaf(to_f(xr[j]), LOG2E, -m));
  s = row_reduce<Sum>(s, red);

  if (active) {
    const float inv = 1.0f / s;
    for (int j = tx; j < N; j += nt) yr[j] = from_f(exp2f(fmaf(to_f(xr[j]), LOG2E, -m)) * inv);
  }
}

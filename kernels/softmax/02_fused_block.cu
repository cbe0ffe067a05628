// 02 fused_block: a group of threads per row, reductions through shared memory.
//
// Changed from 01: blockDim.x threads share a row (blockDim.y rows per block) and stride
// through it together, so a warp reads 32 consecutive elements: every load is coalesced.
// Each pass ends in a block-wide reduction, a tree in shared memory with a barrier per level
// (log2(blockDim.x) + 2 barriers). The geometry comes from the config: blockDim.x is a multiple
// of 32 sized to the row (about EPT elements per thread, at most 1024 threads), and short rows
// pack several rows into a block of ~256 threads, so a 128-element row does not leave 7/8 of
// a 1024-thread block idle.
// Why it should help: coalesced accesses and R * blockDim.x threads instead of R. Still three
// passes: x is read three times, the second and third times from L2 when the rows in flight
// fit in it (short and medium rows), from DRAM when they do not (long rows: 264 rows of 256 KB
// in flight do not fit in 60 MiB).
// Expect ~45 % of copy at 4096 x 65536 float32 (x read ~2-3 times from DRAM), more at medium N.
// What ncu should show: 4 sectors per global request (float32; 2 for bf16's 64-byte warp
// loads), dram__bytes_read.sum between 1x and 3x R*N*size depending on N, barrier stalls at
// short rows (many barriers per element).
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

// Reduce v over the blockDim.x threads of this row (threadIdx.y): a tree in red[], which
// holds blockDim.x floats per row. Every thread of the block must call it (barriers).
template <class Op>
__device__ __forceinline__ float row_reduce(float v, float* red) {
  const int n = blockDim.x, tx = threadIdx.x;
  float* r = red + threadIdx.y * n;
  __syncthreads();  // the previous reduction's readers are done with red[]
  r[tx] = v;
  __syncthreads();
  int s = 1;
  while (2 * s < n) s *= 2;  // the largest power of two below n: folds any n, not only 2^k
  for (; s > 0; s >>= 1) {
    if (tx < s && tx + s < n) r[tx] = Op::apply(r[tx], r[tx + s]);
    __syncthreads();
  }
  return r[0];
}

extern "C" __global__ void __launch_bounds__(1024)
softmax_fused_block(int R, int N, const T* __restrict__ x, T* __restrict__ y) {
  __shared__ float red[1024];
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const bool active = row < R;  // inactive threads still take part in the barriers
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

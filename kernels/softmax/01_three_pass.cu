// 01 three_pass: one thread per row, three passes over the row (max, sum, normalize).
//
// What it is: the textbook softmax, written as a CPU would run it: thread r walks row r
// three times, for its max, for the sum of exp(x - max), and to write exp(x - max) / sum.
// exp(v) is computed as exp2(v * log2(e)) (FFMA + MUFU.EX2) here and in every later variant,
// so the ladder compares structure, not exp implementations; all arithmetic is float32, the
// row sum a plain sequential sum (its rounding error grows like sqrt(N): the problem's float32
// tolerance scales with it).
// Why it is slow: consecutive threads of a warp read addresses N elements apart, so every
// load is its own sector and the warp's 32 rows are walked in lockstep; only R threads exist
// (4096 = 128 warps, about one per SM) to hide DRAM latency; and x is read three times (a row
// is long gone from L2 when the next pass comes back for it at long N). L1 saves it from
// worse: a row's next 31 floats arrive with the line of the first, so a warp waits on DRAM
// once per 32 elements and on L1 in between (~45 cycles per element and pass).
// Expect ~10 % of copy at 4096 x 65536 float32, ~6 % in bf16 (half the bytes per element).
// What ncu should show: 32 sectors per global load request, dram__bytes_read.sum ~3x R*N*size
// at long rows, achieved occupancy a few %, warps stalled on long scoreboard.
// Launch: block (BLOCK), grid (cdiv(R, BLOCK)). Any R, N. Define DTYPE_F32 or DTYPE_BF16.

#if defined(DTYPE_F32) == defined(DTYPE_BF16)
#error "define exactly one of DTYPE_F32 and DTYPE_BF16"
#endif
#ifndef BLOCK
#error "BLOCK (threads per block) must be defined"
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

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_three_pass(int R, int N, const T* __restrict__ x, T* __restrict__ y) {
  const int row = blockIdx.x * BLOCK + threadIdx.x;
  if (row >= R) return;
  const T* xr = x + (size_t)row * N;
  T* yr = y + (size_t)row * N;
  float m = -INFINITY;
  for (int j = 0; j < N; ++j) m = fmaxf(m, to_f(xr[j]));
  m *= LOG2E;
  float s = 0.0f;
  for (int j = 0; j < N; ++j) s += exp2f(fmaf(to_f(xr[j]), LOG2E, -m));
  const float inv = 1.0f / s;
  for (int j = 0; j < N; ++j) yr[j] = from_f(exp2f(fmaf(to_f(xr[j]), LOG2E, -m)) * inv);
}

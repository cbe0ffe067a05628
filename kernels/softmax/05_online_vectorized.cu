// 05 online_vectorized: 04 with 128-bit accesses, and the row kept in registers when it fits.
//
// Changed from 04: (1) x and y move as 16-byte vectors (LDG.E.128 / STG.E.128): VEC = 4
// floats or 8 bf16 per access, a quarter (float32) or an eighth (bf16) of 04's load and store
// instructions. (2) A thread loads CACHE vectors at once (CACHE * 16 bytes in flight), takes
// their max, rescales its running sum once per chunk instead of per element, and adds their
// exps. (3) When the whole row is a single chunk (N <= CACHE * VEC * blockDim.x: every study
// shape except float32 at N = 65536) the vectors stay in registers through the reduction and
// the normalizing pass reads no memory at all: x is read exactly once. Otherwise the
// normalizing pass re-reads x with __ldcs, from L2, as 04 does. y is written with __stcs.
// The register cache costs occupancy: ~60 registers, so a 1024-thread block (long rows) has
// an SM to itself; that also bounds what the re-read needs from L2 (132 float32 rows of
// 256 KiB = 33 MiB in flight, inside the 60 MiB L2).
// Why it should help: 04's scalar loop issues one load, one convert, one exp and one branch
// per element; here loads are 4-8x fewer and the online bookkeeping is per chunk, so the SMs'
// issue rate stops being a limit and DRAM is (bf16 most of all: twice the elements per byte).
// Expect ~85 % (float32: the L2 re-read) and ~88 % (bf16: registers) of copy at 4096 x 65536,
// at or above torch.softmax at every shape.
// What ncu should show: LDG.E.128 / STG.E.128 in the SASS; dram__bytes_read.sum within a few %
// of R*N*size; global requests 4x (float32) / 8x (bf16) fewer than 04; in the register-cached
// case lts__t_bytes.sum ~2x R*N*size (one read, one write) instead of ~3x.
// Measured on the H200 (worklogs/nvidia-h200/softmax*): float32 92 % of copy at 4096 x 65536,
// but the register-cached rows ran at 53 % (float32, N = 16384) and 67 % (bf16, N = 65536):
// one 1024-thread block a row has the SM to itself, and load, reduce and store do not overlap.
// 06_online_tuned, this kernel with 512 threads a row (EPT = 16 VEC, 2 rows an SM), reaches
// 89.7 % (bf16, 65536) and 70.5 % (float32, 16384; there its 8 rows an SM re-read x from
// DRAM, 1.55x the minimum, and are still faster than one row reading it once).
// Shapes: N % VEC == 0 (rows start on 16-byte boundaries). Launch: block (GX, GY), grid
// (cdiv(R, GY)); GX % 32 == 0, GX * GY <= 1024. Define DTYPE_F32 or DTYPE_BF16, VEC, CACHE.

#if defined(DTYPE_F32) == defined(DTYPE_BF16)
#error "define exactly one of DTYPE_F32 and DTYPE_BF16"
#endif
#ifndef VEC
#error "VEC (elements per 16-byte access) must be defined"
#endif
#ifndef CACHE
#error "CACHE (16-byte vectors per thread per chunk) must be defined"
#endif

#ifdef DTYPE_BF16
#include <cuda_bf16.h>
typedef __nv_bfloat16 T;
// element e of a vector: word e / 2, low half first (little-endian); exact bf16 -> float
__device__ __forceinline__ float elem(unsigned w, int half) {
  return __uint_as_float(half ? (w & 0xffff0000u) : (w << 16));
}
__device__ __forceinline__ unsigned pack(float lo, float hi) {
  return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         ((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}
#define PER_WORD 2
#else
typedef float T;
__device__ __forceinline__ float elem(unsigned w, int) { return __uint_as_float(w); }
#define PER_WORD 1
#endif
static_assert(VEC * sizeof(T) == 16, "VEC must make a 16-byte vector of T");

#define LOG2E 1.4426950408889634f

__device__ __forceinline__ unsigned word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
// element e (0 <= e < VEC) of a vector, as float
__device__ __forceinline__ float get(const uint4& v, int e) {
  return elem(word(v, e / PER_WORD), e % PER_WORD);
}

// the vector of y for the vector v of x: 2^(t - m) * inv, packed back into T
__device__ __forceinline__ uint4 normalize(const uint4& v, float m, float inv) {
  float o[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) o[e] = exp2f(get(v, e) * LOG2E - m) * inv;
#ifdef DTYPE_BF16
  return make_uint4(pack(o[0], o[1]), pack(o[2], o[3]), pack(o[4], o[5]), pack(o[6], o[7]));
#else
  return make_uint4(__float_as_uint(o[0]), __float_as_uint(o[1]), __float_as_uint(o[2]),
                    __float_as_uint(o[3]));
#endif
}

__device__ __forceinline__ void md_merge(float& m, float& d, float m2, float d2) {
  const float mm = fmaxf(m, m2);
  d = (m == mm ? d : d * exp2f(m - mm)) + (m2 == mm ? d2 : d2 * exp2f(m2 - mm));
  m = mm;
}

__device__ __forceinline__ void row_reduce_md(float& m, float& d, float* red_m, float* red_d) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float d2 = __shfl_xor_sync(0xffffffffu, d, o);
    md_merge(m, d, m2, d2);
  }
  if (blockDim.x == 32) return;
  const int nw = blockDim.x / 32;
  float* rm = red_m + threadIdx.y * nw;
  float* rd = red_d + threadIdx.y * nw;
  if (threadIdx.x % 32 == 0) {
    rm[threadIdx.x / 32] = m;
    rd[threadIdx.x / 32] = d;
  }
  __syncthreads();
  m = rm[0];
  d = rd[0];
  for (int w = 1; w < nw; ++w) md_merge(m, d, rm[w], rd[w]);
}

extern "C" __global__ void __launch_bounds__(1024)
softmax_online_vec(int R, int N, const T* __restrict__ x, T* __restrict__ y) {
  __shared__ float red_m[32], red_d[32];
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const bool active = row < R;
  const int tx = threadIdx.x, nt = blockDim.x;
  const int nvec = N / VEC;
  const int chunk = CACHE * nt;  // vectors of a row per chunk
  const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)row * N);
  uint4* yr = reinterpret_cast<uint4*>(y + (size_t)row * N);

  uint4 v[CACHE];
  float m = -INFINITY, d = 0.0f;  // log2 units, as in 04
  if (active)
    for (int c0 = 0; c0 < nvec; c0 += chunk) {
#pragma unroll
      for (int k = 0; k < CACHE; ++k) {
        const int i = c0 + k * nt + tx;
        if (i < nvec) v[k] = __ldg(xr + i);
      }
      float cm = -INFINITY;
#pragma unroll
      for (int k = 0; k < CACHE; ++k)
        if (c0 + k * nt + tx < nvec)
#pragma unroll
          for (int e = 0; e < VEC; ++e) cm = fmaxf(cm, get(v[k], e));
      cm *= LOG2E;
      if (cm > m) {  // rescale once per chunk; d = 0 when m = -inf
        d *= exp2f(m - cm);
        m = cm;
      }
#pragma unroll
      for (int k = 0; k < CACHE; ++k)
        if (c0 + k * nt + tx < nvec)
#pragma unroll
          for (int e = 0; e < VEC; ++e) d += exp2f(get(v[k], e) * LOG2E - m);
    }
  row_reduce_md(m, d, red_m, red_d);

  if (active) {
    const float inv = 1.0f / d;
    for (int c0 = 0; c0 < nvec; c0 += chunk) {
      if (nvec > chunk) {  // several chunks: re-read this one (from L2, last use)
#pragma unroll
        for (int k = 0; k < CACHE; ++k) {
          const int i = c0 + k * nt + tx;
          if (i < nvec) v[k] = __ldcs(xr + i);
        }
      }  // else: one chunk, the thread's share of the row is still in v[]
#pragma unroll
      for (int k = 0; k < CACHE; ++k) {
        const int i = c0 + k * nt + tx;
        if (i < nvec) __stcs(yr + i, normalize(v[k], m, inv));
      }
    }
  }
}

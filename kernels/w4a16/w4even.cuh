// What the steps from 15 on share: for those that add pieces of a tile through the workspace
// (15_even_units, 16_even_lean, 17_chunk_blocks), the C fragment's slots, the release add and
// acquire fence between the warp that leaves a piece and the one that completes the tile, and
// y's store; 16's lean scale group with a block's or a warp's sums of x (16, 17, 18_tiled_lean,
// and for 16 batch rows at a time 20_tiled_ring); a lane's L2 request (19_l2_ahead).
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
#pragma once
#include "w4offset.cuh"

constexpr int EVEN_SLOT = 128;  // floats: 16 rows of W x 8 batch rows, batch-row-major

// a piece written by another warp, from L2 (ld.global.cg: no stale line of L1)
__device__ __forceinline__ float even_load_piece(const float* p)
{
#ifdef KERNELBOOK_EMU
  return *p;
#else
  return __ldcg(p);
#endif
}

// *p += v, a release at GPU scope (its MEMBAR makes this warp's earlier stores visible first:
// __syncwarp orders the other lanes' before it); the old value
__device__ __forceinline__ unsigned even_add_release(unsigned* p, unsigned v)
{
#ifdef KERNELBOOK_EMU
  return atomicAdd(p, v);
#else
  unsigned old;
  asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
#endif
}

// an acquire fence at GPU scope: after lane 0's add that completed a tile's count, every piece
// the other warps released before their adds is visible to it
__device__ __forceinline__ void even_acquire()
{
#ifdef KERNELBOOK_EMU
  __threadfence();
#else
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
}

// L2 asked for the line that holds p: no register, no wait (19's loads of W ahead)
__device__ __forceinline__ void even_l2(const void* p)
{
#ifdef KERNELBOOK_EMU
  emu_l2_prefetch(p, 16);  // kept, so that a test sees what was asked for
#else
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// threadIdx.x (BLOCK: blockIdx.x) read again where it is used, so that nothing derived from it
// stays live through the mma loop (a volatile read is not merged with the first)
template <bool BLOCK = false>
__device__ __forceinline__ int even_tid()
{
#ifdef KERNELBOOK_EMU
  return BLOCK ? blockIdx.x : threadIdx.x;
#else
  int t;
  if (BLOCK) asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(t));
  else asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
#endif
}

// the slot index of this lane's C fragment register r: batch row 2t + r % 2, row g or g + 8
__device__ __forceinline__ int even_at(int r, int g, int t)
{
  return (2 * t + r % 2) * 16 + g + (r < 2 ? 0 : 8);
}

// y's rows n0 + g, n0 + g + 8 and batch rows m0 + 2t, + 1 from the C fragment v, inside M x N
__device__ __forceinline__ void even_store(const float (&v)[4], int M, int N, int m0, int n0, int g,
                                           int t, __nv_bfloat16* __restrict__ y)
{
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int n = n0 + g + (r < 2 ? 0 : 8), m = m0 + 2 * t + r % 2;
    if (n < N && m < M) y[(size_t)m * N + n] = __float2bfloat16_rn(v[r]);
  }
}

// the sum of the 32 bf16 in q[0 .. 4), as FP32
__device__ __forceinline__ float even_x_quarter(const uint4* __restrict__ q)
{
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 v = __ldg(q + i);
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) s += __uint_as_float(u[e] << 16) + __uint_as_float(u[e] & 0xFFFF0000u);
  }
  return s;
}

// -136 times the sum of x over each scale group, for batch rows m0 .. m0 + 8 (0 past M), into
// xs[8 gi + r]: the block's threads four lanes an item, 32 elements each
template <int NW>
__device__ __forceinline__ void even_x_sums(float* xs, int M, int K, int m0,
                                            const __nv_bfloat16* __restrict__ x)
{
  const int items = K / 128 * 8, sub = threadIdx.x % 4;
  for (int base = 0; base < items; base += 8 * NW) {  // the same trips for the whole warp
    const int item = base + threadIdx.x / 4, m = m0 + item % 8;
    float s = 0.0f;
    if (item < items && m < M)
      s = even_x_quarter(reinterpret_cast<const uint4*>(x + (size_t)m * K + item / 8 * 128) + 4 * sub);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if (sub == 0 && item < items) xs[item] = -136.0f * s;
  }
}

// -136 sum x over the n groups gb, gb + stride, ... for batch rows m0 .. m0 + 8 into z[8 j + r]
// (0 for the rows past M; z holds 8 n floats): the warp's lanes four an item (a group and a
// batch row there is), the items row by row
__device__ __forceinline__ void even_warp_x_sums(float* z, int M, int K, int m0, int gb, int n,
                                                 int stride, const __nv_bfloat16* __restrict__ x)
{
  const int lane = threadIdx.x % 32, sub = lane % 4, rows = min(8, M - m0);
  __syncwarp();  // every lane done with the last pass's sums
  for (int i = lane; i < 8 * n; i += 32) z[i] = 0.0f;
  __syncwarp();
  for (int base = 0; base < n * rows; base += 8) {  // the same trips for the whole warp
    const int item = base + lane / 4, r = item / n, j = item - r * n;
    float s = 0.0f;
    if (item < n * rows) {
      const __nv_bfloat16* xg = x + (size_t)(m0 + r) * K + (gb + j * stride) * 128;  // its group
      s = even_x_quarter(reinterpret_cast<const uint4*>(xg) + 4 * sub);
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if (sub == 0 && item < n * rows) z[8 * j + r] = -136.0f * s;
  }
  __syncwarp();
}

// acc[j] += the scaled products of scale group gi with batch rows m0 + 8j + g, j < MT, in the
// tiled_pairs layout (nibbles s and s + 4 of a word are its weights 2s and 2s + 1, so that x's
// 32-bit words are the B fragment as they lie: no PRMT), the weights as 128 + q (each A
// fragment made once for the MT tiles of batch rows) and the zero point -136 sum x from
// xs[zs j + 8 zi ..], the group's 8 sums for those 8 rows (no mma of its own: 8 HMMAs a group
// and 8 rows, not 16); a lane past M reads batch row M - 1 again (its C columns are never
// stored: no predicated load)
template <int MT>
__device__ __forceinline__ void even_group_rows(float (&acc)[MT][4], uint4 qa, uint4 qb, float sa,
                                                float sb, int gi, int M, int K, int m0,
                                                const __nv_bfloat16* __restrict__ x,
                                                const float* xs, int zs, int zi)
{
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint4* xr[MT];
#pragma unroll
  for (int j = 0; j < MT; ++j)
    xr[j] = reinterpret_cast<const uint4*>(x + (size_t)min(m0 + 8 * j + g, M - 1) * K + gi * 128) +
            4 * t;
  float c[MT][4] = {};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const unsigned ua = w == 0 ? qa.x : w == 1 ? qa.y : w == 2 ? qa.z : qa.w;
    const unsigned ub = w == 0 ? qb.x : w == 1 ? qb.y : w == 2 ? qb.z : qb.w;
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const uint4 xv = __ldg(xr[j] + w);
      mma_bf16(c[j], nib_biased<0>(ua), nib_biased<0>(ub), nib_biased<1>(ua), nib_biased<1>(ub),
               xv.x, xv.y);
      mma_bf16(c[j], nib_biased<2>(ua), nib_biased<2>(ub), nib_biased<3>(ua), nib_biased<3>(ub),
               xv.z, xv.w);
    }
  }
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    // C columns 2t, 2t + 1
    const float z0 = xs[zs * j + 8 * zi + 2 * t], z1 = xs[zs * j + 8 * zi + 2 * t + 1];
    acc[j][0] = fmaf(sa, c[j][0] + z0, acc[j][0]);  // rows g, g + 8: their group's scale
    acc[j][1] = fmaf(sa, c[j][1] + z1, acc[j][1]);
    acc[j][2] = fmaf(sb, c[j][2] + z0, acc[j][2]);
    acc[j][3] = fmaf(sb, c[j][3] + z1, acc[j][3]);
  }
}

// even_group_rows for the 8 batch rows m0 + g (16, 17, 18)
__device__ __forceinline__ void even_group_lean(float (&acc)[4], uint4 qa, uint4 qb, float sa,
                                                float sb, int gi, int M, int K, int m0,
                                                const __nv_bfloat16* __restrict__ x,
                                                const float* xs, int zi)
{
  even_group_rows<1>(reinterpret_cast<float(&)[1][4]>(acc), qa, qb, sa, sb, gi, M, K, m0, x, xs,
                     0, zi);
}

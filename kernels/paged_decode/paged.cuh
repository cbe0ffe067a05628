// What the paged_decode steps share: the problem's shape, a token's key or value slice (4 of
// D = 128 dims a lane, 8 bytes), the online softmax of one KV head's group of query heads over
// a range of tokens, and the merge of several such partial results.
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
#pragma once
#include <cuda_bf16.h>
#include <math.h>

#define HQ 32
#define HKV 8
#define D 128
#define P 16
#define G (HQ / HKV)  // query heads a KV head serves
#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNROLL
#define UNROLL 1  // tokens a warp has in flight
#endif

__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A partial softmax-weighted sum of one query head: running max m (of scores in log2 units),
// sum l of 2^(s - m), and acc = sum of 2^(s - m) v over this lane's 4 dims.
struct Part {
  float m, l, acc[4];
};

// tokens [t0, t1) of sequence b for KV head kvh, warp-strided by token, UNROLL tokens of a warp
// in flight; qf holds the group's queries (this lane's 4 dims), scaled by log2(e) / sqrt(D).
__device__ __forceinline__ void attend_range(Part (&pt)[G], const float (&qf)[G][4], int b,
                                             int kvh, int t0, int t1, int max_pages, int warp,
                                             int lane, const int* __restrict__ table,
                                             const __nv_bfloat16* __restrict__ kc,
                                             const __nv_bfloat16* __restrict__ vc)
{
  for (int t = t0 + warp; t < t1; t += WARPS * UNROLL) {
    uint2 kr[UNROLL], vr[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int tu = t + u * WARPS;
      if (tu < t1) {
        const int page = table[(size_t)b * max_pages + tu / P];
        const size_t at = (((size_t)page * P + tu % P) * HKV + kvh) * D + 4 * lane;
        kr[u] = __ldcs(reinterpret_cast<const uint2*>(kc + at));  // read once: streaming
        vr[u] = __ldcs(reinterpret_cast<const uint2*>(vc + at));
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (t + u * WARPS >= t1) break;  // the same for every lane
      const float k[4] = {bf_lo(kr[u].x), bf_hi(kr[u].x), bf_lo(kr[u].y), bf_hi(kr[u].y)};
      const float v[4] = {bf_lo(vr[u].x), bf_hi(vr[u].x), bf_lo(vr[u].y), bf_hi(vr[u].y)};
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float s = qf[g][0] * k[0];
        s = fmaf(qf[g][1], k[1], s);
        s = fmaf(qf[g][2], k[2], s);
        s = fmaf(qf[g][3], k[3], s);
        s = warp_sum(s);
        const float mn = fmaxf(pt[g].m, s);
        const float corr = exp2f(pt[g].m - mn), p = exp2f(s - mn);
        pt[g].l = fmaf(pt[g].l, corr, p);
#pragma unroll
        for (int i = 0; i < 4; ++i) pt[g].acc[i] = fmaf(pt[g].acc[i], corr, p * v[i]);
        pt[g].m = mn;
      }
    }
  }
}

// the group's queries for this lane's 4 dims, times log2(e) / sqrt(D) (scores in log2 units)
__device__ __forceinline__ void load_queries(float (&qf)[G][4], int b, int kvh, int lane,
                                             const __nv_bfloat16* __restrict__ q)
{
  const float c = 1.4426950408889634f * 0.08838834764831845f;  // log2(e) / sqrt(128)
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const uint2 r = *reinterpret_cast<const uint2*>(q + ((size_t)b * HQ + kvh * G + g) * D + 4 * lane);
    qf[g][0] = bf_lo(r.x) * c;
    qf[g][1] = bf_hi(r.x) * c;
    qf[g][2] = bf_lo(r.y) * c;
    qf[g][3] = bf_hi(r.y) * c;
  }
}

// acc (this lane's 4 dims), l and m of a result merged with another's (mi, li, acci):
// each weighted by 2^(its m - the larger m); an empty one (m = -inf) weighs 0
__device__ __forceinline__ void merge(Part& into, float mi, float li, const float (&acci)[4])
{
  const float mn = fmaxf(into.m, mi);
  if (mn == -INFINITY) return;  // both empty
  const float a = exp2f(into.m - mn), w = exp2f(mi - mn);
  into.l = into.l * a + li * w;
#pragma unroll
  for (int i = 0; i < 4; ++i) into.acc[i] = into.acc[i] * a + acci[i] * w;
  into.m = mn;
}

// the block's WARPS partial results per head, merged through shared memory: warp g merges
// head g (WARPS == G) and returns it; each lane holds its 4 dims
__device__ __forceinline__ Part merge_warps(const Part (&pt)[G], int warp, int lane)
{
  static_assert(WARPS == G, "warp g merges query head g of the group");
  __shared__ float sm_m[WARPS][G], sm_l[WARPS][G], sm_acc[WARPS][G][D];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) {
      sm_m[warp][g] = pt[g].m;
      sm_l[warp][g] = pt[g].l;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) sm_acc[warp][g][4 * lane + i] = pt[g].acc[i];
  }
  __syncthreads();
  Part out{-INFINITY, 0.0f, {0.0f, 0.0f, 0.0f, 0.0f}};
  for (int w = 0; w < WARPS; ++w) {
    const float a[4] = {sm_acc[w][warp][4 * lane], sm_acc[w][warp][4 * lane + 1],
                        sm_acc[w][warp][4 * lane + 2], sm_acc[w][warp][4 * lane + 3]};
    merge(out, sm_m[w][warp], sm_l[w][warp], a);
  }
  return out;
}

__device__ __forceinline__ void init_parts(Part (&pt)[G])
{
#pragma unroll
  for (int g = 0; g < G; ++g) {
    pt[g].m = -INFINITY;
    pt[g].l = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) pt[g].acc[i] = 0.0f;
  }
}

// o's 4 dims of this lane for query head h of sequence b: acc / l in bf16
__device__ __forceinline__ void store_o(__nv_bfloat16* __restrict__ o, int b, int h, int lane,
                                        const Part& r)
{
  __nv_bfloat16* out = o + ((size_t)b * HQ + h) * D + 4 * lane;
  const float inv = 1.0f / r.l;
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = __float2bfloat16_rn(r.acc[i] * inv);
}

#ifdef PAGED_SPLIT
// Split-KV (02, 03): each block's merged (m, l, acc) per query head goes to the workspace
// unnormalized; a combine kernel merges a sequence's S records and writes o.
#ifndef MAX_SPLIT
#define MAX_SPLIT 32
#endif
#define REC (D + 2)  // a partial result: m, l, acc[D]

__device__ __forceinline__ float* record(float* ws, int b, int h, int z)
{
  return ws + 64 + ((size_t)(b * HQ + h) * MAX_SPLIT + z) * REC;  // 64 floats: the header
}

// block (kvh, b, z) of a grid (HKV, B, S): the tokens [t0, t1) of sequence b it takes, whole
// pages of an even split of L (a split past b's length gets t0 >= t1); the first block writes
// S into the workspace's header for the combine
__device__ __forceinline__ void split_range(int L, const int* __restrict__ lens,
                                            float* __restrict__ ws, int& t0, int& t1)
{
  const int b = blockIdx.y, z = blockIdx.z, S = gridDim.z;
  if (blockIdx.x == 0 && b == 0 && z == 0 && threadIdx.x == 0) reinterpret_cast<int*>(ws)[0] = S;
  const int chunk = ((L + S - 1) / S + P - 1) / P * P;
  t0 = z * chunk;
  t1 = min(lens[b], t0 + chunk);
}

// this lane's 4 dims of a block's merged result for query head h of sequence b, split z
__device__ __forceinline__ void store_record(float* ws, int b, int h, int z, int lane,
                                             const Part& r)
{
  float* rec = record(ws, b, h, z);
  if (lane == 0) {
    rec[0] = r.m;
    rec[1] = r.l;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) rec[2 + 4 * lane + i] = r.acc[i];
}

// o[b][h][d] from the S partial results of (b, h): a block per (b, h), a thread per dim
extern "C" __global__ void __launch_bounds__(D)
paged_split_kv_combine(int B, int L, int max_pages, const int* __restrict__ lens,
                       const int* __restrict__ table, const __nv_bfloat16* __restrict__ q,
                       const __nv_bfloat16* __restrict__ kc, const __nv_bfloat16* __restrict__ vc,
                       __nv_bfloat16* __restrict__ o, float* __restrict__ ws)
{
  const int bh = blockIdx.x, d = threadIdx.x;
  if (bh >= B * HQ) return;
  const int S = reinterpret_cast<const int*>(ws)[0];
  float m = -INFINITY, l = 0.0f, acc = 0.0f;
  for (int z = 0; z < S; ++z) {
    const float* rec = record(ws, bh / HQ, bh % HQ, z);
    const float mi = rec[0];
    const float mn = fmaxf(m, mi);
    if (mn == -INFINITY) continue;  // empty so far and empty here
    const float a = exp2f(m - mn), w = exp2f(mi - mn);
    l = l * a + rec[1] * w;
    acc = acc * a + rec[2 + d] * w;
    m = mn;
  }
  o[(size_t)bh * D + d] = __float2bfloat16_rn(acc / l);
}
#endif  // PAGED_SPLIT

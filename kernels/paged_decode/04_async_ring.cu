// 04_async_ring: 03's page per warp, its keys and values copied by cp.async into a ring of NS
// pages a warp in shared memory, so that NS - 1 pages are in flight while the warp does a
// page's math.
//
// Changed from 03: ncu at batch 64, KV 16k showed 03 at 75.8 % of DRAM peak with
// long-scoreboard the first stall: a warp loads its page (8 KB into 64 registers), then does
// ~830 instructions of math with nothing in flight, so the SM's 12 warps average well under
// their 96 KB peak of bytes in flight; and the 162 registers those loads need allow 3 blocks.
// Here each warp runs its own cp.async pipeline (no block barrier: a warp copies, waits for
// and reads only its own pages):
// - a page is 512 16-byte copies, 16 a lane; 16 lanes copy a token's 256 contiguous bytes of
//   its KV head; lanes past the sequence's end copy zeros (src-size 0), so a partial page
//   scores -inf there and adds 0 x 0 to the values;
// - keys land with their 16-byte chunk index XORed with 2 (token & 3), so that the score
//   reads (lane pair t owns token t, 8 chunks each, LDS.128) hit 8 different bank groups in
//   every quarter warp; values land as they are and are read as whole 256-byte rows (LDS.64);
// - the block table entry of the page to copy next is loaded a page ahead, its latency under
//   the math;
// - the math is 03's, reading shared memory instead of registers, so no page is held in
//   registers: 127 registers (sm_90a, nvcc 13.0, no spills) instead of 162.
// NS = 3 stages of 8 KB, 4 warps: 96 KB of dynamic shared memory a block, 2 blocks an SM, 8
// warps and 16 pages (128 KB) in flight an SM at all times, not only between pages.
// Hypothesis: the DRAM pipe stays full: >= 85 % of the read ceiling at batch 64, KV 16k.
// What ncu should show: dram__throughput above 03's 75.8 %, long-scoreboard stalls replaced by
// waits at the pipeline (cp.async.wait_group), issue slots still well under 100 %.
//
// Sizes: any B, L. Launch: grid (8, B, S), block 128 (WARPS = 4, warp g merges head g), dynamic
// shared memory NS x 32 KB; then the combine (paged.cuh), grid (B * 32), block 128.
#define PAGED_SPLIT  // the workspace records and the combine kernel (paged.cuh)
#include "paged.cuh"
#include "ring.cuh"  // the warp's page ring: NS stages of CHUNKS, its cp.async copies

// this lane's 16 copies of page `page` (valid tokens of it: `valid`, 0 for none) into a stage:
// keys at [token][chunk ^ 2 (token & 3)], values at 256 + [token][chunk]. Copy i of lane l is
// chunk l % 16 of token l / 16 + 2 i: the offsets but the page's are the lane's own plus
// constants (immediates), its swizzle one of two by the parity of i.
__device__ __forceinline__ void copy_page(uint4* st, const __nv_bfloat16* __restrict__ kc,
                                          const __nv_bfloat16* __restrict__ vc, int page,
                                          int valid, int kvh, int lane)
{
  const int t = lane / 16, ch = lane % 16;
  const size_t at = ((size_t)page * P + t) * HKV * D + kvh * D + 8 * ch;
  const __nv_bfloat16* const kg = kc + at;
  const __nv_bfloat16* const vg = vc + at;
  uint4* const ks = st + t * 16;
  const int s0 = ch ^ (t << 1), s1 = ch ^ ((t + 2) << 1);  // (token & 3) = t or t + 2
#pragma unroll
  for (int i = 0; i < CHUNKS / 2 / 32; ++i) {
    const bool ok = t + 2 * i < valid;
    copy16(ks + 32 * i + (i % 2 ? s1 : s0), kg + (size_t)i * 2 * HKV * D, ok);
    copy16(ks + CHUNKS / 2 + 32 * i + ch, vg + (size_t)i * 2 * HKV * D, ok);
  }
}

__device__ __forceinline__ float dot8(float4 a, float4 b, uint4 k, float s)
{
  s = fmaf(a.x, bf_lo(k.x), s);
  s = fmaf(a.y, bf_hi(k.x), s);
  s = fmaf(a.z, bf_lo(k.y), s);
  s = fmaf(a.w, bf_hi(k.y), s);
  s = fmaf(b.x, bf_lo(k.z), s);
  s = fmaf(b.y, bf_hi(k.z), s);
  s = fmaf(b.z, bf_lo(k.w), s);
  return fmaf(b.w, bf_hi(k.w), s);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
paged_async_ring(int B, int L, int max_pages, const int* __restrict__ lens,
                 const int* __restrict__ table, const __nv_bfloat16* __restrict__ q,
                 const __nv_bfloat16* __restrict__ kc, const __nv_bfloat16* __restrict__ vc,
                 __nv_bfloat16* __restrict__ o, float* __restrict__ ws)
{
  const int kvh = blockIdx.x, b = blockIdx.y, z = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int t0, t1;
  split_range(L, lens, ws, t0, t1);

  DYNAMIC_SMEM_U4(ring);
  uint4* const mine = ring + (size_t)warp * NS * CHUNKS;  // this warp's NS stages
  const int* const row = table + (size_t)b * max_pages;
  const int first = t0 / P + warp;  // this warp's pages: first, first + WARPS, ...
  auto copy = [&](uint4* st, int page, int valid) { copy_page(st, kc, vc, page, valid, kvh, lane); };
  PageRing<NS, CHUNKS, decltype(copy)> pages(mine, row, first, t1, WARPS, copy);

  __shared__ float4 qs[G][D / 4];         // the group's queries, times log2(e) / sqrt(D)
  __shared__ float4 ps[WARPS][G][P / 4];  // a warp's page: each head's 16 probabilities
  const float c = 1.4426950408889634f * 0.08838834764831845f;
  for (int i = threadIdx.x; i < G * D / 4; i += 32 * WARPS) {
    const int g = i / (D / 4), j = i % (D / 4);
    const uint2 r = *reinterpret_cast<const uint2*>(q + ((size_t)b * HQ + kvh * G + g) * D + 4 * j);
    qs[g][j] = make_float4(bf_lo(r.x) * c, bf_hi(r.x) * c, bf_lo(r.y) * c, bf_hi(r.y) * c);
  }
  __syncthreads();

  const int tt = lane / 2, half = lane % 2;  // scores: token tt of the page, chunks 2 i + half
  const int swz = (tt & 3) << 1;
  float m[G], lp[G], acc[G][4];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    lp[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[g][i] = 0.0f;
  }
  for (int pg = first; pg * P < t1; pg += WARPS) {
    const uint4* const st = pages.current();
    const int valid = min(P, t1 - pg * P);
    uint4 kr[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) kr[i] = st[tt * 16 + ((2 * i + half) ^ swz)];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) s = dot8(qs[g][4 * i + 2 * half], qs[g][4 * i + 2 * half + 1], kr[i], s);
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      if (tt >= valid) s = -INFINITY;
      float mx = s;
#pragma unroll
      for (int off = 2; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float mn = fmaxf(m[g], mx);  // finite: the page's first token is in range
      const float corr = exp2f(m[g] - mn), p = exp2f(s - mn);  // exp2(-inf) = 0
      lp[g] = fmaf(lp[g], corr, half == 0 ? p : 0.0f);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[g][i] *= corr;
      m[g] = mn;
      if (half == 0) reinterpret_cast<float*>(ps[warp][g])[tt] = p;
    }
    __syncwarp();
    const uint2* const vrow = reinterpret_cast<const uint2*>(st + CHUNKS / 2) + lane;
#pragma unroll
    for (int u4 = 0; u4 < P / 4; ++u4) {
      uint2 vr[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) vr[j] = vrow[(4 * u4 + j) * (D / 4)];  // token 4 u4 + j
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float4 p4 = ps[warp][g][u4];
        const float pu[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[g][0] = fmaf(pu[j], bf_lo(vr[j].x), acc[g][0]);
          acc[g][1] = fmaf(pu[j], bf_hi(vr[j].x), acc[g][1]);
          acc[g][2] = fmaf(pu[j], bf_lo(vr[j].y), acc[g][2]);
          acc[g][3] = fmaf(pu[j], bf_hi(vr[j].y), acc[g][3]);
        }
      }
    }
    pages.release();
  }
  pages.finish();
  Part pt[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    pt[g].m = m[g];
    pt[g].l = warp_sum(lp[g]);
#pragma unroll
    for (int i = 0; i < 4; ++i) pt[g].acc[i] = acc[g][i];
  }
  const Part r = merge_warps(pt, warp, lane);
  store_record(ws, b, kvh * G + warp, z, lane, r);
}

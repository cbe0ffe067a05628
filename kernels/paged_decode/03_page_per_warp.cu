// 03_page_per_warp: 02's split-KV with a warp taking a whole page (16 tokens) at a time, its
// lanes split over tokens for the scores and over dims for the values.
//
// Changed from 02: 02 gives a token to the whole warp (4 dims a lane), so every score is a
// 32-lane sum: 5 shuffles per query head per token, 320 shuffles and ~2,000 instructions a
// warp per page, more than an SM can issue at the read ceiling (~450 cycles a page an SM at
// 4.8 TB/s). Here, per page:
// - scores: lanes 2t and 2t+1 own token t of the page, 64 dims each (eight 16-byte loads,
//   each lane pair reading 32 contiguous bytes, so every sector a load touches is whole);
//   each lane dots them with the 4 queries (kept in shared memory as FP32, read as
//   broadcast LDS.128), one shuffle joins the halves, and 4 more give the page's maximum;
//   a token past the sequence's end scores -inf;
// - values: each lane owns 4 dims of all 16 tokens (sixteen 8-byte loads, a warp's load a
//   256-byte row), and takes the 16 probabilities of each head from shared memory;
// - the running sum l is a lane's own (its tokens' probabilities), summed once at the end.
// That is ~830 instructions a warp per page and 8 KB of loads in flight a warp (02: 1 KB).
// The grid splits a sequence over S blocks aiming at SPLIT_BLOCKS blocks an SM, so that at
// batch 64 the sequences' unequal lengths (L/2 to L) spread over ~8 blocks an SM instead of
// leaving SMs idle at the tail; 02's combine kernel merges the S records.
// Hypothesis: no longer issue-bound, with the bytes in flight an SM needs: >= 85 % of the
// read ceiling at batch 64, KV 16k, and at batch 1, KV 64k (S up to MAX_SPLIT = 64).
// What ncu should show: dram__throughput near its peak; issue slots well under 100 %; the
// stall mix long-scoreboard, not short-scoreboard (shuffles) or math.
//
// Sizes: any B, L. Launch: grid (8, B, S), block 128 (WARPS = 4: warp g merges head g); then
// the combine, grid (B * 32), block 128. Shared memory: the group's queries (2 KB) and each
// warp's page of probabilities (256 bytes), static. 162 registers (sm_90a, nvcc 13.0), no
// spills: 3 blocks, 12 warps and ~96 KB of loads in flight an SM. Capped at 128 registers
// (4 blocks) it spills 140 bytes.
#define PAGED_SPLIT  // the workspace records and the combine kernel (paged.cuh)
#include "paged.cuh"

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
paged_page_per_warp(int B, int L, int max_pages, const int* __restrict__ lens,
                    const int* __restrict__ table, const __nv_bfloat16* __restrict__ q,
                    const __nv_bfloat16* __restrict__ kc, const __nv_bfloat16* __restrict__ vc,
                    __nv_bfloat16* __restrict__ o, float* __restrict__ ws)
{
  const int kvh = blockIdx.x, b = blockIdx.y, z = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int t0, t1;
  split_range(L, lens, ws, t0, t1);

  __shared__ float4 qs[G][D / 4];    // the group's queries, times log2(e) / sqrt(D)
  __shared__ float4 ps[WARPS][G][P / 4];  // a warp's page: each head's 16 probabilities
  const float c = 1.4426950408889634f * 0.08838834764831845f;
  for (int i = threadIdx.x; i < G * D / 4; i += 32 * WARPS) {
    const int g = i / (D / 4), j = i % (D / 4);
    const uint2 r = *reinterpret_cast<const uint2*>(q + ((size_t)b * HQ + kvh * G + g) * D + 4 * j);
    qs[g][j] = make_float4(bf_lo(r.x) * c, bf_hi(r.x) * c, bf_lo(r.y) * c, bf_hi(r.y) * c);
  }
  __syncthreads();

  const int tt = lane / 2, half = lane % 2;  // scores: token tt of the page, dims 16 i + 8 half
  const size_t tok_stride = (size_t)HKV * D;  // elements from a token to the next
  float m[G], lp[G], acc[G][4];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    lp[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[g][i] = 0.0f;
  }
  for (int pg = t0 / P + warp; pg * P < t1; pg += WARPS) {
    const int page = table[(size_t)b * max_pages + pg];
    const int valid = min(P, t1 - pg * P);  // tokens of this page in range: 1 to 16
    const __nv_bfloat16* kp = kc + (size_t)page * P * tok_stride + (size_t)kvh * D;
    const __nv_bfloat16* vp = vc + (size_t)page * P * tok_stride + (size_t)kvh * D;
    uint4 kr[8];
    uint2 vr[P];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      kr[i] = tt < valid ? __ldcs(reinterpret_cast<const uint4*>(kp + tt * tok_stride + 16 * i + 8 * half))
                         : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < P; ++u)
      vr[u] = u < valid ? __ldcs(reinterpret_cast<const uint2*>(vp + u * tok_stride + 4 * lane))
                        : make_uint2(0, 0);
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
#pragma unroll
    for (int u4 = 0; u4 < P / 4; ++u4) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float4 p4 = ps[warp][g][u4];
        const float pu[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint2 v = vr[4 * u4 + j];
          acc[g][0] = fmaf(pu[j], bf_lo(v.x), acc[g][0]);
          acc[g][1] = fmaf(pu[j], bf_hi(v.x), acc[g][1]);
          acc[g][2] = fmaf(pu[j], bf_lo(v.y), acc[g][2]);
          acc[g][3] = fmaf(pu[j], bf_hi(v.y), acc[g][3]);
        }
      }
    }
    __syncwarp();  // every lane has read ps before the next page writes it
  }
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

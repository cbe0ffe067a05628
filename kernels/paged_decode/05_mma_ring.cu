// 05_mma_ring: 04's per-warp ring of pages, with a page's scores and its weighted values
// computed on the BF16 tensor cores (mma.sync m16n8k16) instead of the FMA pipe.
//
// Changed from 04: ncu at batch 64, KV 16k showed 04's long-scoreboard stalls gone (0.08 an
// issue) but DRAM still at 77 % of peak, with the SM issuing about every other cycle (2 warps
// a scheduler, stalls wait 1.07, short-scoreboard 0.67, not-selected 0.37 an issue): a page
// costs ~1,000 instructions a warp (512 FMAs of scores and values, their bf16 unpacking, the
// shuffles), too many to hide behind 8 KB of reads with so few warps. Here a page is:
// - scores S = Q K^T: A = the group's 4 query heads (rows 4..15 zero), B = the page's keys
//   (16 tokens = 2 n-tiles), 8 k-steps over D: 16 mmas, B fragments by 8 ldmatrix.x4;
// - softmax on the accumulators: lane quad g owns head g's 4 scores of each n-tile pair,
//   the page's max by 2 shuffles (not 5), 4 exp2 a lane;
// - values O += P V: A = P from the score accumulators (the C -> A layout identity, rounded
//   to bf16 as FlashAttention does), B = the values by 8 ldmatrix.x4.trans, 16 n-tiles of
//   8 dims: 16 mmas;
// ~380 instructions a warp a page in the SASS loop, 16 of them its cp.async copies (04: ~1,080).
// Keys and values land with their 16-byte chunk index XORed with (token & 7), so that each 8x8
// matrix an ldmatrix reads (8 tokens, one chunk) hits 8 bank groups.
// Hypothesis: with the issue load cut ~3x, 04's pipeline keeps DRAM busy: >= 85 % of the read
// ceiling at batch 64, KV 16k.
// What ncu should show: dram__throughput near its peak; issue active well under 04's; the
// stall mix the pipeline's wait (long-scoreboard on the ldmatrix after cp.async.wait_group).
//
// Sizes: any B, L. Launch: grid (8, B, S), block 128 (WARPS = 4, warp g merges head g), dynamic
// shared memory NS x 32 KB; then the combine (paged.cuh), grid (B * 32), block 128.
#define PAGED_SPLIT  // the workspace records and the combine kernel (paged.cuh)
#include "paged.cuh"
#include "ring.cuh"
#include "../common/mma.cuh"
#define ROW (D / 8)             // 16-byte chunks of a token's 128 dims: 16

// chunk ch of token t of a stage's keys (values: + CHUNKS / 2), swizzled
__device__ __forceinline__ int at_chunk(int t, int ch) { return t * ROW + (ch ^ (t & 7)); }

// this lane's 16 copies of page `page` (valid tokens of it: `valid`) into a stage: copy i is
// chunk lane % 16 of token lane / 16 + 2 i, for the keys and for the values
__device__ __forceinline__ void copy_page(uint4* st, const __nv_bfloat16* __restrict__ kc,
                                          const __nv_bfloat16* __restrict__ vc, int page,
                                          int valid, int kvh, int lane)
{
  const int t = lane / 16, ch = lane % 16;
  const size_t at = ((size_t)page * P + t) * HKV * D + kvh * D + 8 * ch;
#pragma unroll
  for (int i = 0; i < CHUNKS / 2 / 32; ++i) {
    const int tok = t + 2 * i;
    const bool ok = tok < valid;
    const size_t off = at + (size_t)i * 2 * HKV * D;
    copy16(st + at_chunk(tok, ch), kc + off, ok);
    copy16(st + CHUNKS / 2 + at_chunk(tok, ch), vc + off, ok);
  }
}

// B fragments of the scores for k-step kk (dims 16 kk ..): r[2 j + h] = keys of tokens
// 8 j + lane / 4, dims 16 kk + 8 h + 2 (lane % 4), + 1 (ldmatrix.x4 of the 8x8 matrices
// (tokens 8 j .., chunk 2 kk + h))
__device__ __forceinline__ void key_frags(const uint4* st, int kk, int lane, unsigned (&r)[4])
{
#ifdef KERNELBOOK_EMU
  for (int i = 0; i < 4; ++i) {
    const int t = 8 * (i / 2) + lane / 4, ch = 2 * kk + i % 2;
    r[i] = reinterpret_cast<const unsigned*>(st + at_chunk(t, ch))[lane % 4];
  }
#else
  const int m = lane / 8, t = 8 * (m / 2) + lane % 8, ch = 2 * kk + m % 2;
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(st + at_chunk(t, ch)));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#endif
}

// B fragments of the values for n-tiles nt and nt + 1 (dims 8 nt ..): r[2 e + h] = values of
// tokens 8 h + 2 (lane % 4), + 1 (low half first), dim 8 (nt + e) + lane / 4
// (ldmatrix.x4.trans of the 8x8 matrices (tokens 8 h .., chunk nt + e))
__device__ __forceinline__ void value_frags(const uint4* st, int nt, int lane, unsigned (&r)[4])
{
  const uint4* const vs = st + CHUNKS / 2;
#ifdef KERNELBOOK_EMU
  for (int i = 0; i < 4; ++i) {
    const int t = 8 * (i % 2) + 2 * (lane % 4), ch = nt + i / 2, d = lane / 4;
    const unsigned short lo = reinterpret_cast<const unsigned short*>(vs + at_chunk(t, ch))[d];
    const unsigned short hi = reinterpret_cast<const unsigned short*>(vs + at_chunk(t + 1, ch))[d];
    r[i] = lo | (unsigned)hi << 16;
  }
#else
  const int m = lane / 8, t = 8 * (m % 2) + lane % 8, ch = nt + m / 2;
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(vs + at_chunk(t, ch)));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#endif
}

// two floats as one bf16x2 word, x in the low half
__device__ __forceinline__ unsigned pack_bf16(float x, float y)
{
  return __bfloat16_as_ushort(__float2bfloat16_rn(x)) |
         (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(y)) << 16;
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
paged_mma_ring(int B, int L, int max_pages, const int* __restrict__ lens,
               const int* __restrict__ table, const __nv_bfloat16* __restrict__ q,
               const __nv_bfloat16* __restrict__ kc, const __nv_bfloat16* __restrict__ vc,
               __nv_bfloat16* __restrict__ o, float* __restrict__ ws)
{
  const int kvh = blockIdx.x, b = blockIdx.y, z = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, qd = lane % 4;  // the mma's row group and quad position
  int t0, t1;
  split_range(L, lens, ws, t0, t1);

  DYNAMIC_SMEM_U4(ring);
  uint4* const mine = ring + (size_t)warp * NS * CHUNKS;  // this warp's NS stages
  const int* const row = table + (size_t)b * max_pages;
  const int first = t0 / P + warp;  // this warp's pages: first, first + WARPS, ...
  auto copy = [&](uint4* st, int page, int valid) { copy_page(st, kc, vc, page, valid, kvh, lane); };
  PageRing<NS, CHUNKS, decltype(copy)> pages(mine, row, first, t1, WARPS, copy);

  // A fragments of the queries (rows: the group's heads 0..3, rows 4..15 zero), unscaled bf16;
  // the scores are scaled by log2(e) / sqrt(D) in FP32
  unsigned qa[D / 16][2];
  {
    const unsigned* qh =
        reinterpret_cast<const unsigned*>(q + ((size_t)b * HQ + kvh * G + (g < G ? g : 0)) * D);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      qa[kk][0] = g < G ? qh[8 * kk + qd] : 0u;      // dims 16 kk + 2 qd, + 1
      qa[kk][1] = g < G ? qh[8 * kk + 4 + qd] : 0u;  // + 8
    }
  }
  const float c = 1.4426950408889634f * 0.08838834764831845f;
  float m = -INFINITY, l = 0.0f;  // head g's running max (log2 units) and this lane's sum
  float acc[D / 8][4];            // O of head g: n-tile nt holds dims 8 nt + 2 qd, + 1
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;

  for (int pg = first; pg * P < t1; pg += WARPS) {
    const uint4* const st = pages.current();
    const int valid = min(P, t1 - pg * P);
    // S: [n-tile j][k-step parity][4], two chains a tile so that no mma waits on the last
    float s[2][2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[j][h][i] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned kb[4];
      key_frags(st, kk, lane, kb);
      mma_bf16(s[0][kk % 2], qa[kk][0], 0u, qa[kk][1], 0u, kb[0], kb[1]);
      mma_bf16(s[1][kk % 2], qa[kk][0], 0u, qa[kk][1], 0u, kb[2], kb[3]);
    }
    // head g's scores of tokens 8 j + 2 qd + e (rows g + 8 of the tile are padding)
    float sc[2][2], mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = (s[j][0][e] + s[j][1][e]) * c;
        sc[j][e] = 8 * j + 2 * qd + e < valid ? v : -INFINITY;
        mx = fmaxf(mx, sc[j][e]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m, mx);  // finite: the page's first token is in range
    const float corr = exp2f(m - mn);
    float p[2][2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) p[j][e] = exp2f(sc[j][e] - mn);  // exp2(-inf) = 0
    l = fmaf(l, corr, (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
    m = mn;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      acc[nt][0] *= corr;  // rows g + 8 (acc[nt][2], [3]) stay 0: their A rows are 0
      acc[nt][1] *= corr;
    }
    // P as the A fragment: tokens 2 qd, + 1 (a0) and 8 + 2 qd, + 1 (a2) of row g
    const unsigned pa0 = pack_bf16(p[0][0], p[0][1]), pa2 = pack_bf16(p[1][0], p[1][1]);
#pragma unroll
    for (int nt = 0; nt < D / 8; nt += 2) {
      unsigned vb[4];
      value_frags(st, nt, lane, vb);
      mma_bf16(acc[nt], pa0, 0u, pa2, 0u, vb[0], vb[1]);
      mma_bf16(acc[nt + 1], pa0, 0u, pa2, 0u, vb[2], vb[3]);
    }
    pages.release();
  }
  pages.finish();
  l += __shfl_xor_sync(0xffffffffu, l, 1);  // head g's sum over its quad's tokens
  l += __shfl_xor_sync(0xffffffffu, l, 2);

  // this warp's (m, l, O) of the 4 heads through its own first stage, into merge_warps'
  // layout (a lane's 4 dims 4 lane .. of every head)
  __syncwarp();
  float* const buf = reinterpret_cast<float*>(mine);  // [G][D] of O, then m[G], l[G]
  if (g < G) {
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      buf[g * D + 8 * nt + 2 * qd] = acc[nt][0];
      buf[g * D + 8 * nt + 2 * qd + 1] = acc[nt][1];
    }
    if (qd == 0) {
      buf[G * D + g] = m;
      buf[G * D + G + g] = l;
    }
  }
  __syncwarp();
  Part pt[G];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    pt[h].m = buf[G * D + h];
    pt[h].l = buf[G * D + G + h];
#pragma unroll
    for (int i = 0; i < 4; ++i) pt[h].acc[i] = buf[h * D + 4 * lane + i];
  }
  const Part r = merge_warps(pt, warp, lane);
  store_record(ws, b, kvh * G + warp, z, lane, r);
}

// 14_bulk_ring: 13's tiled W and scales brought into shared memory by the copy engine, each
// warp its own ring: lane 0 keeps STAGES chunks of the warp's scale groups in flight (one
// cp.async.bulk of W and one of the scales a chunk, completing on the warp's mbarrier), on a
// persistent grid, so that the bytes in flight cost no registers and no load instructions.
//
// Changed from 13: where the bytes wait. 13 holds its loads in registers (qa, qb: 8 registers
// a group a lane), so the bytes an SM keeps in flight are bounded by its registers: its best
// point (4 warps, 2 groups in flight a warp, 5 blocks an SM at 96 registers) has 20 warps x
// 2 KB = 40 KB in flight, and a wider tune of 13 on the H200 (2 to 8 warps, 2 to 8 groups in
// flight, 2 to 5 blocks an SM; kernelbook bench at a1602bf) found nothing faster at M = 1:
// more groups a warp costs blocks an SM. Its grid's 1792 short blocks (2.7 waves at
// N = 28672) each end in a sum through shared memory with nothing in flight. Here each warp
// takes a contiguous range of a tile's groups (K / 128 / WARPS of them), and its lane 0 asks
// the copy engine for the range's chunks STAGES ahead, the cursor running on into the
// block's next tile (07's persistent grid: the tiles shared out evenly), so the copies go on
// through a tile's sum. A warp reads its fragments back with one 16-byte shared load a lane
// (lanes contiguous: no bank conflict) and waits only on its own mbarriers: no barrier but
// the tile's sum. (A first version with one ring a block, refilled after a block barrier
// every chunk, was slower than 13 at every point: the barrier, not the bytes, bounded it.)
// Why it should help: WARPS x BLOCKS_SM x STAGES x CHUNK KB in flight an SM (64 KB at 4 x 4 x
// 2 x 2) whatever the registers, and no gap at a tile's end.
// Hypothesis: >= 80 % of a streaming read of the same bytes at both M = 1 headlines (13:
// 69.4 % at 1 x 28672 x 4096, 22.2 us; 74.4 % at 1 x 128256 x 4096, 84.3 us), 3x cuBLAS
// BF16 at both (<= 18.8 and <= 79 us).
// What ncu should show: dram__throughput near the streaming read's, UBLKCP in the SASS, no
// global loads of W, stalls on the mbarrier wait rather than on long scoreboard.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(tiles, cdiv(tiles, SM_COUNT *
// BLOCKS_SM))), block (32 * WARPS), dynamic shared memory WARPS * STAGES * CHUNK * 1056 bytes.
#include "w4offset.cuh"
#include "../common/cp_async.cuh"  // DYNAMIC_SMEM_U4

#ifndef WARPS
#define WARPS 4
#endif
#ifndef CHUNK
#define CHUNK 2  // scale groups a copy: CHUNK KB of W and CHUNK x 32 bytes of scales
#endif
#ifndef STAGES
#define STAGES 4  // chunks in flight a warp
#endif
#ifndef BLOCKS_SM
#define BLOCKS_SM 4
#endif
static_assert(STAGES >= 2, "a slot is refilled one __syncwarp before it is read again");

typedef float BulkPartials[WARPS][4][4][32];

// ---- the copy engine, and what the CPU emulator does instead -----------------------------
// (the emulator: the copy is a plain synchronous copy by the thread that asks for it, and
// the STAGES >= 2 __syncwarp()s between a refill and its read make it visible to the others)
__device__ __forceinline__ unsigned smem_addr(const void* p)
{
#ifdef KERNELBOOK_EMU
  return 0;
#else
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
#endif
}

__device__ __forceinline__ void ring_init(unsigned long long* full)
{
#ifndef KERNELBOOK_EMU
  for (int s = 0; s < STAGES; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(full + s)));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// bytes from global src to shared dst (both 16-byte aligned, a multiple of 16), counted on bar
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes,
                                          unsigned long long* bar)
{
#ifdef KERNELBOOK_EMU
  memcpy(dst, src, bytes);
#else
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
      ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
#endif
}

__device__ __forceinline__ void expect_bytes(unsigned long long* bar, unsigned bytes)
{
#ifndef KERNELBOOK_EMU
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void wait_full(unsigned long long* bar, unsigned parity)
{
#ifndef KERNELBOOK_EMU
  unsigned done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

__device__ __forceinline__ uint4 lds128(const uint4* p)
{
#ifdef KERNELBOOK_EMU
  return *p;
#else
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_addr(p)));
  return v;
#endif
}

// ---- a warp's stream ---------------------------------------------------------------------
// Warp w's groups of a tile: [lo, hi), a contiguous range (the first K / 128 % WARPS warps one
// more). Its items, in order: for each of the block's tiles (blockIdx.x, + gridDim.x, ...),
// for each pass over the batch rows, the range's chunks. Item i lives in slot i % STAGES of
// the warp's ring. A cursor walks them STAGES ahead of the reading loop: counters, no division.
struct Range {
  int lo, chunks;  // first group, chunks (0: a warp with no group when K / 128 < WARPS)
  int n;           // groups
};

struct Cursor {
  int tile, pass, chunk;
  __device__ __forceinline__ void next(int chunks, int passes)
  {
    if (++chunk == chunks) {
      chunk = 0;
      if (++pass == passes) pass = 0, tile += gridDim.x;
    }
  }
};

// lane 0: the chunk at cursor `at` into slot s of this warp's ring
__device__ __forceinline__ void issue(const Cursor& at, int s, const Range& r, int groups,
                                      unsigned char* wring, unsigned char* sring,
                                      unsigned long long* full, const uint4* __restrict__ Wt,
                                      const __nv_bfloat16* __restrict__ St)
{
  const int n = min(CHUNK, r.n - at.chunk * CHUNK);
  const size_t g0 = (size_t)at.tile * groups + r.lo + (size_t)at.chunk * CHUNK;
  expect_bytes(full + s, n * (1024 + 32));
  bulk_copy(wring + s * CHUNK * 1024, Wt + g0 * 64, n * 1024, full + s);
  bulk_copy(sring + s * CHUNK * 32, reinterpret_cast<const unsigned char*>(St) + g0 * 32, n * 32,
            full + s);
}

template <int MT>
__device__ __forceinline__ void bulk_stream(BulkPartials& part, unsigned char* wring,
                                            unsigned char* sring, unsigned long long* full,
                                            const Range& r, Cursor wr, int tiles, int groups,
                                            int passes, int M, int N, int K,
                                            const __nv_bfloat16* __restrict__ x,
                                            const uint4* __restrict__ Wt,
                                            const __nv_bfloat16* __restrict__ St,
                                            __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, g = lane / 4;
  unsigned i = 0;  // this warp's items read so far
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x)
    for (int pass = 0; pass < passes; ++pass) {
      const int m0 = 16 * pass;
      float acc[MT][4];
#pragma unroll
      for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
      for (int c = 0; c < r.chunks; ++c, ++i) {
        const int s = i % STAGES, n = min(CHUNK, r.n - c * CHUNK);
        wait_full(full + s, (i / STAGES) & 1);
        const uint4* w = reinterpret_cast<const uint4*>(wring + s * CHUNK * 1024) + lane;
        const unsigned* sc = reinterpret_cast<const unsigned*>(sring + s * CHUNK * 32) + g;
        for (int k = 0; k < n; ++k) {
          const uint4 qa = lds128(w + 64 * k), qb = lds128(w + 64 * k + 32);
          const unsigned sv = sc[8 * k];  // rows g (low half) and g + 8 (high half)
          const float sa = __uint_as_float(sv << 16), sb = __uint_as_float(sv & 0xFFFF0000u);
          w4_group_offset<MT>(acc, qa, qb, sa, sb, r.lo + c * CHUNK + k, M, K, m0, x);
        }
        __syncwarp();  // the warp is done with slot s: refill it
        if (lane == 0 && wr.tile < tiles) {
          issue(wr, s, r, groups, wring, sring, full, Wt, St);
          wr.next(r.chunks, passes);
        }
      }
      sum_warps_store<WARPS, MT>(part, acc, M, N, m0, tile * 16, y);
    }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, BLOCKS_SM)
w4_bulk_ring(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
             const unsigned* __restrict__ Wt, const __nv_bfloat16* __restrict__ St,
             __nv_bfloat16* __restrict__ y)
{
  __shared__ BulkPartials part;
  __shared__ __align__(8) unsigned long long bars[WARPS][STAGES];
  DYNAMIC_SMEM_U4(ring);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles = (N + 15) / 16, groups = K / 128;
  const int passes = M <= 8 ? 1 : (M + 15) / 16;
  // this warp's range of groups: groups / WARPS each, the first groups % WARPS one more
  const int base = groups / WARPS, extra = groups % WARPS;
  Range r;
  r.n = base + (warp < extra);
  r.lo = warp * base + min(warp, extra);
  r.chunks = (r.n + CHUNK - 1) / CHUNK;
  unsigned char* wring = reinterpret_cast<unsigned char*>(ring) + warp * STAGES * CHUNK * 1024;
  unsigned char* sring = reinterpret_cast<unsigned char*>(ring) + WARPS * STAGES * CHUNK * 1024 +
                         warp * STAGES * CHUNK * 32;
  unsigned long long* full = bars[warp];
  const uint4* wt = reinterpret_cast<const uint4*>(Wt);
  Cursor wr{(int)blockIdx.x, 0, 0};  // the next chunk lane 0 asks for
  if (lane == 0) {
    ring_init(full);
    for (int s = 0; s < STAGES && r.chunks > 0 && wr.tile < tiles; ++s) {
      issue(wr, s, r, groups, wring, sring, full, wt, St);
      wr.next(r.chunks, passes);
    }
  }
  __syncwarp();  // the warp's barriers initialised (and, emulated, its first chunks copied)
  if (r.chunks == 0) wr.tile = tiles;  // a warp with no group asks for nothing
  if (M <= 8)
    bulk_stream<1>(part, wring, sring, full, r, wr, tiles, groups, passes, M, N, K, x, wt, St, y);
  else
    bulk_stream<2>(part, wring, sring, full, r, wr, tiles, groups, passes, M, N, K, x, wt, St, y);
}

// 14_bulk_ring: 13's tiled W and scales brought into shared memory by the copy engine (one
// cp.async.bulk per chunk of a tile's scale groups, completing on an mbarrier) on a persistent
// grid, so that the bytes in flight cost no registers and no load instructions.
//
// Changed from 13: where the bytes wait. 13 holds its loads in registers (qa, qb: 8 registers
// a group a lane), so the bytes an SM keeps in flight are bounded by its registers: its best
// point (4 warps, 2 groups in flight a warp, 5 blocks an SM at 96 registers) has 20 warps x
// 2 KB = 40 KB in flight, and a wider tune (tools/explore notes in the w4a16 page: 2 to 8
// warps, 2 to 8 groups, 2 to 5 blocks, 24 spill-free points) found nothing faster at M = 1:
// more groups a warp costs blocks an SM, and the grid's 1792 short blocks (2.7 waves at
// N = 28672) each end in a sum through shared memory with no load in flight. Here one thread
// of each block asks the copy engine for STAGES chunks of CHUNK groups ahead (CHUNK KB of W
// and CHUNK x 32 bytes of scales each, contiguous in the tiled layout), into a ring in shared
// memory; the warps read their fragments back with one 16-byte shared load a lane (lanes
// contiguous: no bank conflict), and the persistent grid (07's: the tiles shared out evenly)
// streams its next tile's chunks while a tile's sum runs. Every chunk ends with a barrier,
// after which the slot is refilled.
// Why it should help: BLOCKS_SM x STAGES x CHUNK KB in flight an SM (64 KB at 2 x 4 x 8)
// whatever the registers, and no gap at a tile's end.
// Hypothesis: >= 80 % of a streaming read of the same bytes at both M = 1 headlines (13:
// 69.4 % at 1 x 28672 x 4096, 22.2 us; 74.4 % at 1 x 128256 x 4096, 84.3 us), which is
// 3x cuBLAS BF16 at both (needs <= 18.8 and <= 79 us).
// What ncu should show: dram__throughput near the streaming read's, UBLKCP in the SASS, no
// l1tex global loads of W, stalls on the mbarrier wait (the copies late) rather than on
// long scoreboard.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(tiles, cdiv(tiles, SM_COUNT *
// BLOCKS_SM))), block (32 * WARPS), dynamic shared memory STAGES * CHUNK * 1056 bytes.
#include "w4offset.cuh"
#include "../common/cp_async.cuh"  // DYNAMIC_SMEM_U4

#ifndef WARPS
#define WARPS 4
#endif
#ifndef CHUNK
#define CHUNK 8  // scale groups a copy: CHUNK KB of W and CHUNK x 32 bytes of scales
#endif
#ifndef STAGES
#define STAGES 4  // chunks in flight a block
#endif
#ifndef BLOCKS_SM
#define BLOCKS_SM 2
#endif
static_assert(STAGES >= 2, "a slot is refilled one barrier before it is read again");

typedef float BulkPartials[WARPS][4][4][32];

// ---- the copy engine, and what the CPU emulator does instead -----------------------------
// (the emulator: the copy is a plain synchronous copy by the thread that asks for it, and
// the STAGES >= 2 barriers between a refill and its read make it visible to the others)
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

// ---- the stream -------------------------------------------------------------------------
// A block's items, in order: for each of its tiles (blockIdx.x, + gridDim.x, ...), for each
// pass over the batch rows, the tile's chunks. Item i lives in slot i % STAGES. Two cursors
// walk them, one reading, one STAGES ahead issuing: counters, no division.
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

// thread 0: the chunk at cursor `at` into slot s
__device__ __forceinline__ void issue(const Cursor& at, int s, int groups, uint4* ring,
                                      unsigned long long* full, const uint4* __restrict__ Wt,
                                      const __nv_bfloat16* __restrict__ St)
{
  const int n = min(CHUNK, groups - at.chunk * CHUNK);
  const size_t g0 = (size_t)at.tile * groups + (size_t)at.chunk * CHUNK;
  unsigned char* wdst = reinterpret_cast<unsigned char*>(ring) + (size_t)s * CHUNK * 1024;
  unsigned char* sdst =
      reinterpret_cast<unsigned char*>(ring) + (size_t)STAGES * CHUNK * 1024 + s * CHUNK * 32;
  expect_bytes(full + s, n * (1024 + 32));
  bulk_copy(wdst, Wt + g0 * 64, n * 1024, full + s);
  bulk_copy(sdst, reinterpret_cast<const unsigned char*>(St) + g0 * 32, n * 32, full + s);
}

template <int MT>
__device__ __forceinline__ void bulk_stream(BulkPartials& part, uint4* ring,
                                            unsigned long long* full, Cursor wr, int tiles,
                                            int groups, int chunks, int passes, int M, int N,
                                            int K, const __nv_bfloat16* __restrict__ x,
                                            const uint4* __restrict__ Wt,
                                            const __nv_bfloat16* __restrict__ St,
                                            __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4;
  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  Cursor rd{(int)blockIdx.x, 0, 0};
  for (unsigned i = 0; rd.tile < tiles; ++i) {
    const int s = i % STAGES, n = min(CHUNK, groups - rd.chunk * CHUNK);
    wait_full(full + s, (i / STAGES) & 1);
    const uint4* w = ring + (size_t)s * CHUNK * 64 + lane;
    const unsigned* sc =
        reinterpret_cast<const unsigned*>(ring + (size_t)STAGES * CHUNK * 64) + s * CHUNK * 8 + g;
    const int m0 = 16 * rd.pass;
    for (int lg = warp; lg < n; lg += WARPS) {  // this warp's groups of the chunk
      const uint4 qa = lds128(w + 64 * lg), qb = lds128(w + 64 * lg + 32);
      const unsigned sv = sc[8 * lg];  // rows g (low half) and g + 8 (high half)
      const float sa = __uint_as_float(sv << 16), sb = __uint_as_float(sv & 0xFFFF0000u);
      w4_group_offset<MT>(acc, qa, qb, sa, sb, rd.chunk * CHUNK + lg, M, K, m0, x);
    }
    __syncthreads();  // every warp is done with slot s: refill it
    if (threadIdx.x == 0 && wr.tile < tiles) {
      issue(wr, s, groups, ring, full, Wt, St);
      wr.next(chunks, passes);
    }
    if (rd.chunk == chunks - 1) {  // the tile's (and pass's) last chunk: its sum, and y
      sum_warps_store<WARPS, MT>(part, acc, M, N, m0, rd.tile * 16, y);
#pragma unroll
      for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    }
    rd.next(chunks, passes);
  }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, BLOCKS_SM)
w4_bulk_ring(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
             const unsigned* __restrict__ Wt, const __nv_bfloat16* __restrict__ St,
             __nv_bfloat16* __restrict__ y)
{
  __shared__ BulkPartials part;
  __shared__ __align__(8) unsigned long long full[STAGES];
  DYNAMIC_SMEM_U4(ring);
  const int tiles = (N + 15) / 16, groups = K / 128, chunks = (groups + CHUNK - 1) / CHUNK;
  const int passes = M <= 8 ? 1 : (M + 15) / 16;
  const uint4* wt = reinterpret_cast<const uint4*>(Wt);
  Cursor wr{(int)blockIdx.x, 0, 0};  // the next chunk to ask for
  if (threadIdx.x == 0) {
    ring_init(full);
    for (int s = 0; s < STAGES && wr.tile < tiles; ++s) {
      issue(wr, s, groups, ring, full, wt, St);
      wr.next(chunks, passes);
    }
  }
  __syncthreads();  // the barriers initialised (and, emulated, the first chunks copied)
  // thread 0's cursor is now STAGES items ahead of the reading one (the others' is not used)
  if (M <= 8)
    bulk_stream<1>(part, ring, full, wr, tiles, groups, chunks, passes, M, N, K, x, wt, St, y);
  else bulk_stream<2>(part, ring, full, wr, tiles, groups, chunks, passes, M, N, K, x, wt, St, y);
}

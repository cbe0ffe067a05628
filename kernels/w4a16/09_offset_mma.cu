// 09_offset_mma: 06's tensor-core GEMV with the zero point moved into the mma, W kept out of
// L1, and registers cut so that 24 warps an SM fit instead of 16.
//
// Changed from 06: its ncu at 1 x 28672 x 4096 shows a latency-bound kernel with few warps:
// 14.6 warps active an SM of 64 (128 registers a thread cap it at 16), issue slots 43 % busy,
// long-scoreboard 2.8 and the fixed-latency stalls (wait, math-pipe throttle, not selected)
// another 3 warps an issue; 140 instructions a scale group a warp (2 KB of W), of which 32
// are the bf16x2 subtractions of 136 and 16 x's permutes; and L2 serving 94 MB for 61 MB of
// W, x (read by every warp) evicted from L1 by W's streaming loads. Here:
// - the weights go to the mma as 128 + q (one LOP3 a nibble pair, no subtraction), and each
//   k16 step's B fragment is multiplied once more by a constant A of -136 into the same
//   accumulators: sum (128 + q) x - 136 sum x = sum (q - 8) x. 8 more HMMAs a group on a
//   tensor pipe 10 % busy, 32 fewer HADD2s, no extra register;
// - W by ld.global.nc.L1::no_allocate, as decode_gemm's 08: W never lands in L1, so x stays
//   there;
// - only the one- and two-tile paths (M <= 8, M <= 16), batches past 16 in passes of 16 over
//   the block's tile (its 32 KB of W still in L2 on the second pass), so that the kernel fits
//   MIN_BLOCKS = 6 blocks an SM (80 registers): 24 warps, UNR = 4 groups of W in flight each,
//   1.5 times 06's bytes in flight an SM.
// Hypothesis: ~110 instructions a group instead of 140 and half again as many warps to hide
// them: >= 75 % of the read ceiling at 1 x 28672 x 4096 (06: 56 %) and >= 3x cuBLAS BF16 on
// 128256 x 4096.
// What ncu should show: no HADD2.BF16_V2 and twice 06's HMMAs in the SASS; ~24 warps active
// an SM; lts__t_bytes close to dram__bytes_read; dram__throughput well above 06's 46 %.
// Measured (H200, `kernelbook bench w4a16 06_lop3_dequant 08_cp_async_ring` and the four
// candidates, side by side, 35c1692): at 1 x 28672 x 4096, 25.2 us (UNR 2, 5 blocks an SM)
// against 06's 27.1 and 08's 27.4; at 1 x 128256 x 4096, 90.9 us (UNR 4, 5 blocks) against
// 97.9 and 95.2; at 16 x 28672 x 4096, 51.8 against 53.2. 6 blocks an SM spill at 80
// registers; 4 (128) are slower than 5 (96) everywhere. ncu at 1 x 28672 x 4096 (UNR 4, under
// ncu's locked clocks): 28 % of warps active against 06's 23 %, tensor pipe 22.2 % against
// 10.3 %, FMA pipe 9.4 % against 12.2 %, ALU 50 % against 47 %, DRAM 50 % against 46 %, the
// long-scoreboard stall 4.4 warps an issue against 4.0: fewer instructions, and still waiting
// on W. lts__t_bytes stayed at 93 MB for 61 MB from DRAM although W no longer passes through
// L1: the extra L2 traffic is most likely the scales' 2-byte loads (a 32-byte sector each).
// What is left (tools/explore/w4_read_pattern.py, the same grid reading W and doing nothing
// else): this grid of 16-row tiles, each lane's 16-byte pieces two rows apart, reads 60 MB in
// ~26 us of event time and 263 MB in ~78; read contiguously, 512 bytes a warp instruction,
// ~22.5 and ~65. The 3x target needs another shape of the read, not fewer instructions.
// The hypothesis holds in direction only: 2.1x cuBLAS BF16 at 28672 and 2.6x at 128256, not 3x.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (cdiv(N, 16)), block (32 * WARPS),
// static shared memory WARPS * 4 * 4 * 32 floats.
#include "w4offset.cuh"

#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNR
#define UNR 4  // scale groups a warp loads before using any
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 6  // blocks an SM: 24 warps of 4, at most 80 registers a thread
#endif

typedef float Partials[WARPS][4][4][32];  // each warp's accumulators, lane-major

// W4_L2_PREFETCH (12): one thread of the block asks L2 for a whole tile's W and scales at once
// (cp.async.bulk.prefetch: contiguous bytes, 16-byte aligned, a multiple of 16 long; a hint
// that holds no register and no shared memory)
#ifndef W4_L2_PREFETCH
#define W4_L2_PREFETCH 0
#endif
#if W4_L2_PREFETCH
__device__ __forceinline__ void l2_prefetch(const void* p, unsigned bytes)
{
#ifdef KERNELBOOK_EMU
  if (bytes) emu_l2_prefetch(p, bytes);
#else
  if (bytes) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes));
#endif
}

// tile's 16 rows of W (rows x K / 2 contiguous bytes) and of S (rows x K / 64, rounded down
// to 16: the few bytes left are read anyway)
__device__ __forceinline__ void l2_prefetch_tile(int tile, int N, int K,
                                                 const unsigned* __restrict__ Wq,
                                                 const __nv_bfloat16* __restrict__ S)
{
  const int n0 = tile * 16, rows = min(16, N - n0);
  l2_prefetch(Wq + (size_t)n0 * (K / 8), (unsigned)rows * (K / 2));
  l2_prefetch(S + (size_t)n0 * (K / 128), ((unsigned)rows * (K / 64)) & ~15u);
}
#endif

// y[m0 .. m0 + 8 * MT) x [n0 .. n0 + 16) of this block: MT n8 tiles of batch rows
template <int MT>
__device__ __forceinline__ void w4_offset_tile(Partials& part, int M, int N, int K, int m0, int n0,
                                               const __nv_bfloat16* __restrict__ x,
                                               const unsigned* __restrict__ Wq,
                                               const __nv_bfloat16* __restrict__ S,
                                               __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int ra = n0 + g, rb = n0 + g + 8, groups = K / 128;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // this lane's 16 bytes of group gi of rows ra and rb: uint4 number 4 gi + t of the row
  const uint4* wa = reinterpret_cast<const uint4*>(Wq + (size_t)ra * (K / 8)) + t;
  const uint4* wb = reinterpret_cast<const uint4*>(Wq + (size_t)rb * (K / 8)) + t;
  float acc[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  for (int g0 = warp; g0 < groups; g0 += WARPS * UNR) {
    uint4 qa[UNR], qb[UNR];
    float sa[UNR], sb[UNR];
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const int gi = g0 + u * WARPS;
      const bool in = gi < groups;
      qa[u] = in && ra < N ? load_w(wa + 4 * gi) : zero;
      qb[u] = in && rb < N ? load_w(wb + 4 * gi) : zero;
      sa[u] = in && ra < N ? __bfloat162float(S[(size_t)ra * groups + gi]) : 0.0f;
      sb[u] = in && rb < N ? __bfloat162float(S[(size_t)rb * groups + gi]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const int gi = g0 + u * WARPS;
      if (gi >= groups) break;  // the same for the whole warp
      w4_group_offset<MT>(acc, qa[u], qb[u], sa[u], sb[u], gi, M, K, m0, x);
    }
  }
  sum_warps_store<WARPS, MT>(part, acc, M, N, m0, n0, y);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
w4_offset_mma(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
              const unsigned* __restrict__ Wq, const __nv_bfloat16* __restrict__ S,
              __nv_bfloat16* __restrict__ y)
{
  __shared__ Partials part;
  const int n0 = blockIdx.x * 16;
  if (n0 >= N) return;  // the whole block
#if W4_L2_PREFETCH
  // the tile AHEAD blocks on (a block of a later wave: its bytes in L2 before it starts),
  // and, in the first AHEAD blocks, which nothing prefetched, this block's own
  if (threadIdx.x == 0) {
    const int b = blockIdx.x;
    if (b < AHEAD) l2_prefetch_tile(b, N, K, Wq, S);
    if (b + AHEAD < (int)gridDim.x) l2_prefetch_tile(b + AHEAD, N, K, Wq, S);
  }
#endif
  if (M <= 8) w4_offset_tile<1>(part, M, N, K, 0, n0, x, Wq, S, y);
  else
    for (int m0 = 0; m0 < M; m0 += 16) w4_offset_tile<2>(part, M, N, K, m0, n0, x, Wq, S, y);
}

// 14_bulk_ring: 13's tiled W streamed by the TMA unit into a shared-memory ring that one warp
// keeps full, on a persistent grid, and the zero point's mmas replaced by a sum of x per
// scale group, made once a block.
//
// Changed from 13: 13 reads W straight into registers (UNR = 2 groups, 2 KB a warp, ~40 KB
// an SM in flight at 5 blocks of 4 warps) on a grid of 1792 blocks at 1 x 28672 x 4096, each
// living for 16 rows of W (33 KB): its loads come in bursts, none in flight while a warp
// computes or while a block drains and the next starts. ncu: DRAM 53 % of peak,
// long-scoreboard 3.94 warps an issue, issue slots 39 % busy, tensor pipe 25 %; the same
// grid reading W and doing nothing else (tools/explore/w4_read_pattern.py) already takes
// ~19.5 us of kernel time against the streaming read's ~15. Here:
// - one block an SM (BLOCKS_SM), each taking a contiguous run of ~T / (132 BLOCKS_SM) tiles;
// - its last warp, one lane, copies each tile's W and scales, CG scale groups at a time (CG
//   KB of W and 32 CG bytes of scales, contiguous in the tiled layout), by cp.async.bulk into
//   a ring of STAGES slots, each completing on its "full" mbarrier; so STAGES x CG KB an SM
//   are in flight whatever the other warps do, and two instructions move a slot;
// - the CWARPS other warps take a slot's groups in turn (group g0 + i to warp i % CWARPS),
//   read their lane's 2 x 16 bytes and 4 bytes of scales back from shared memory (each warp
//   read 512 contiguous bytes: no bank conflict), compute 09's products, and arrive on the
//   slot's "empty" mbarrier; at a tile's end their partials meet through shared memory
//   (double-buffered, one named barrier of the consumer warps a tile);
// - the zero point: sum (q - 8) x = sum (128 + q) x - 136 sum x, and sum x over a group is
//   the same for every tile; the block sums x once per group and batch row (-136 times it,
//   in shared memory), and each group's four accumulators take it by an FADD where 09 and
//   13 ran 8 more HMMAs a group (half the tensor pipe's work).
// Hypothesis: the read near the streaming read's rate, the products hidden under it:
// >= 80 % of the read ceiling at 1 x 28672 x 4096 (13: 68 %), >= 3x cuBLAS BF16 there and at
// 1 x 128256 x 4096.
// What ncu should show: DRAM throughput well above 13's 53 %; long-scoreboard stalls near
// zero (the consumers wait on mbarriers: stall "long scoreboard" gone, "barrier"/"sleeping"
// instead); HMMAs a group halved (8); lts__t_bytes near dram__bytes_read.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (min(cdiv(N, 16), SM_COUNT * BLOCKS_SM)),
// block (32 * (CWARPS + 1)), dynamic shared memory 16 STAGES + 1056 STAGES CG + 4096 CWARPS
// + 128 K / 128 bytes.
#include "../common/bulk.cuh"
#include "w4offset.cuh"

#ifndef CWARPS
#define CWARPS 8  // consumer warps; one more issues the copies
#endif
#ifndef CG
#define CG 8  // scale groups a slot: CG KB of W and 32 CG bytes of scales
#endif
#ifndef STAGES
#define STAGES 6  // slots in the ring
#endif
#ifndef BLOCKS_SM
#define BLOCKS_SM 1
#endif
constexpr int MP = 32;  // batch rows a pass over W: four n8 tiles at most
constexpr int CTHREADS = 32 * CWARPS;

// the dynamic shared memory, carved: barriers, W's ring, the scales' ring, the tile partials
// (two buffers of CWARPS x 4 n8 tiles x 4 registers x 32 lanes), -136 sum x per group and
// batch row of the pass
struct BulkRing {
  uint64_t* full;
  uint64_t* empty;
  uint4* w;
  unsigned* s;
  float* part;
  float* xs;
};

__device__ __forceinline__ BulkRing carve(unsigned char* base)
{
  BulkRing r;
  r.full = reinterpret_cast<uint64_t*>(base);
  r.empty = r.full + STAGES;
  r.w = reinterpret_cast<uint4*>(base + 16 * STAGES);
  r.s = reinterpret_cast<unsigned*>(r.w + STAGES * CG * 64);
  r.part = reinterpret_cast<float*>(r.s + STAGES * CG * 8);
  r.xs = r.part + 2 * CWARPS * 4 * 4 * 32;
  return r;
}

// the tiles of block b: a contiguous run, the runs as even as T allows
__device__ __forceinline__ void tile_run(int T, int& begin, int& end)
{
  begin = (int)((long long)blockIdx.x * T / gridDim.x);
  end = (int)((long long)(blockIdx.x + 1) * T / gridDim.x);
}

// the copying lane: every slot of every pass, in the consumers' order
__device__ __forceinline__ void produce(const BulkRing& r, int M, int N, int K, const uint4* Wt,
                                        const unsigned* St)
{
  const int groups = K / 128, T = (N + 15) / 16;
  int t0, t1;
  tile_run(T, t0, t1);
  unsigned it = 0;
  for (int m0 = 0; m0 < M; m0 += MP)
    for (int tile = t0; tile < t1; ++tile)
      for (int g0 = 0; g0 < groups; g0 += CG, ++it) {
        const int slot = it % STAGES, n = min(CG, groups - g0);
        mbar_wait(&r.empty[slot], ((it / STAGES) & 1u) ^ 1u);  // the first round is free
        mbar_arrive_expect_tx(&r.full[slot], n * 1056u);
        const size_t at = (size_t)tile * groups + g0;
        bulk_copy(r.w + slot * CG * 64, Wt + at * 64, n * 1024u, &r.full[slot]);
        bulk_copy(r.s + slot * CG * 8, St + at * 8, n * 32u, &r.full[slot]);
      }
}

// -136 times sum x over each group, for batch rows m0 .. m0 + MP (0 past M), into r.xs: four
// lanes a (group, row), 32 elements each
__device__ __forceinline__ void x_sums(const BulkRing& r, int M, int K, int m0,
                                       const __nv_bfloat16* __restrict__ x)
{
  const int items = (K / 128) * MP, sub = threadIdx.x % 4;
  for (int base = 0; base < items; base += CTHREADS / 4) {
    const int item = base + threadIdx.x / 4, gi = item / MP, m = m0 + item % MP;
    float s = 0.0f;
    if (item < items && m < M) {
      const uint4* p = reinterpret_cast<const uint4*>(x + (size_t)m * K + gi * 128 + 32 * sub);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint4 v = __ldg(p + i);
        const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) s += __uint_as_float(u[e] << 16) + __uint_as_float(u[e] & 0xFFFF0000u);
      }
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if (sub == 0 && item < items) r.xs[item] = -136.0f * s;
  }
}

// acc[j] += group gi's products with batch rows m0 + mo + 8 j + g (09's, without the zero
// point's mmas: the weights as 128 + q, then -136 sum x added from r.xs), scaled
template <int MT>
__device__ __forceinline__ void group_products(float (&acc)[MT][4], const BulkRing& r, uint4 qa,
                                               uint4 qb, unsigned sc, int gi, int M, int K,
                                               int m0, int mo, const __nv_bfloat16* __restrict__ x)
{
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float c[MT][4];
#pragma unroll
  for (int j = 0; j < MT; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const unsigned ua = w == 0 ? qa.x : w == 1 ? qa.y : w == 2 ? qa.z : qa.w;
    const unsigned ub = w == 0 ? qb.x : w == 1 ? qb.y : w == 2 ? qb.z : qb.w;
    const unsigned a[2][4] = {
        {nib_biased<0>(ua), nib_biased<0>(ub), nib_biased<1>(ua), nib_biased<1>(ub)},
        {nib_biased<2>(ua), nib_biased<2>(ub), nib_biased<3>(ua), nib_biased<3>(ub)}};
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const int m = m0 + mo + 8 * j + g;  // this lane's batch row of the B fragment
      const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)m * K + gi * 128 + 32 * t);
      const uint4 xv = m < M ? __ldg(xr + w) : zero;
      mma_bf16(c[j], a[0][0], a[0][1], a[0][2], a[0][3], x_pair<0>(xv), x_pair<1>(xv));
      mma_bf16(c[j], a[1][0], a[1][1], a[1][2], a[1][3], x_pair<2>(xv), x_pair<3>(xv));
    }
  }
  const float sa = __uint_as_float(sc << 16), sb = __uint_as_float(sc & 0xFFFF0000u);
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    // C columns 2t and 2t + 1 are batch rows m0 + mo + 8 j + 2t, + 1
    const float* z = r.xs + gi * MP + mo + 8 * j + 2 * t;
    const float z0 = z[0], z1 = z[1];
    acc[j][0] = fmaf(sa, c[j][0] + z0, acc[j][0]);  // rows g, g + 8: their group's scale
    acc[j][1] = fmaf(sa, c[j][1] + z1, acc[j][1]);
    acc[j][2] = fmaf(sb, c[j][2] + z0, acc[j][2]);
    acc[j][3] = fmaf(sb, c[j][3] + z1, acc[j][3]);
  }
}

// a pass of the consumer warps over the block's tiles, batch rows m0 .. m0 + 8 MT
template <int MT>
__device__ __forceinline__ void consume(const BulkRing& r, unsigned& it, unsigned& dealt, int& buf, int M, int N,
                                        int K, int m0, const __nv_bfloat16* __restrict__ x,
                                        __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int groups = K / 128, T = (N + 15) / 16;
  int t0, t1;
  tile_run(T, t0, t1);
  x_sums(r, M, K, m0, x);
  named_sync<CTHREADS>(1);  // the sums in place
  for (int tile = t0; tile < t1; ++tile) {
    float acc[MT][4];
#pragma unroll
    for (int j = 0; j < MT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    for (int g0 = 0; g0 < groups; g0 += CG, ++it) {
      const int slot = it % STAGES, n = min(CG, groups - g0);
      mbar_wait(&r.full[slot], (it / STAGES) & 1u);
      // the block's groups dealt to the warps in turn across slots and tiles (group k of the
      // block's stream to warp k % CWARPS), so that no warp is short where CG and the
      // groups a tile are not multiples of CWARPS
      const int first = (int)((warp + CWARPS - dealt % CWARPS) % CWARPS);
      dealt += n;
      for (int i = first; i < n; i += CWARPS) {  // the same for the whole warp
        const uint4* wp = r.w + (slot * CG + i) * 64;
        const uint4 qa = wp[lane], qb = wp[32 + lane];
        const unsigned sc = r.s[(slot * CG + i) * 8 + g];
        if (MT <= 2) {
          group_products<MT>(acc, r, qa, qb, sc, g0 + i, M, K, m0, 0, x);
        } else {  // batch rows 16 at a time: two n8 tiles' products live, not four
          group_products<2>(*reinterpret_cast<float(*)[2][4]>(&acc[0]), r, qa, qb, sc, g0 + i,
                            M, K, m0, 0, x);
          group_products<2>(*reinterpret_cast<float(*)[2][4]>(&acc[2]), r, qa, qb, sc, g0 + i,
                            M, K, m0, 16, x);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&r.empty[slot]);  // this warp is done with the slot
    }
    // the warps' partials of this tile through shared memory, buffer buf: the barrier of the
    // next tile, which every warp passes only after its sums of this one, frees it
    float* part = r.part + buf * CWARPS * 4 * 4 * 32;
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) part[((warp * 4 + j) * 4 + q) * 32 + lane] = acc[j][q];
    named_sync<CTHREADS>(1);
    for (int task = warp; task < MT * 4; task += CWARPS) {  // one (n8 tile, register) a warp
      const int j = task / 4, q = task % 4;
      float s = 0.0f;
      for (int w = 0; w < CWARPS; ++w) s += part[((w * 4 + j) * 4 + q) * 32 + lane];
      const int n = tile * 16 + g + (q < 2 ? 0 : 8), m = m0 + 8 * j + 2 * t + q % 2;
      if (n < N && m < M) y[(size_t)m * N + n] = __float2bfloat16_rn(s);
    }
    buf ^= 1;
  }
  // the next pass's x_sums may write r.xs at once: every warp passed the last tile's barrier
  // after its last group
}

extern "C" __global__ void __launch_bounds__(32 * (CWARPS + 1), BLOCKS_SM)
w4_bulk_ring(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
             const unsigned* __restrict__ Wt, const __nv_bfloat16* __restrict__ St,
             __nv_bfloat16* __restrict__ y)
{
#ifdef KERNELBOOK_EMU
  unsigned char* smem = emu_dynamic_smem;
#else
  extern __shared__ __align__(16) unsigned char smem[];
#endif
  const BulkRing r = carve(smem);
  if (threadIdx.x == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&r.full[i], 1);  // the copying lane's arrival, and the bytes
      mbar_init(&r.empty[i], CWARPS);  // each consumer warp's
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x / 32 == CWARPS) {
    if (threadIdx.x % 32 == 0)
      produce(r, M, N, K, reinterpret_cast<const uint4*>(Wt),
              reinterpret_cast<const unsigned*>(St));
    return;
  }
  unsigned it = 0, dealt = 0;  // slots and groups so far
  int buf = 0;
  for (int m0 = 0; m0 < M; m0 += MP) {
    const int rows = min(MP, M - m0);
    if (rows <= 8) consume<1>(r, it, dealt, buf, M, N, K, m0, x, y);
    else if (rows <= 16) consume<2>(r, it, dealt, buf, M, N, K, m0, x, y);
    else consume<4>(r, it, dealt, buf, M, N, K, m0, x, y);
  }
}

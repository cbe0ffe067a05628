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
// - the CWARPS other warps take the block's groups in turn (group k of its stream to warp
//   k % CWARPS, across slots and tiles), UNRG at once (independent mma chains), read their
//   lane's 2 x 16 bytes and 4 bytes of scales back from shared memory (each warp reads 512
//   contiguous bytes: no bank conflict), compute 09's products, and arrive on the slot's
//   "empty" mbarrier; at a tile's end each warp leaves its partials in shared memory and
//   counts itself done (an integer atomic), and the last one sums them and stores y: no
//   barrier between the consumer warps, STAGES + 1 tiles' buffers; batches past 16 in
//   passes of 16 rows over the block's tiles (W streamed again), so that the kernel's one
//   register budget is that of two n8 tiles;
// - x's rows past M are read as row M - 1 (their columns of C are never stored): no
//   predicated load, no zeroed registers;
// - the zero point: sum (q - 8) x = sum (128 + q) x - 136 sum x, and sum x over a group is
//   the same for every tile; the block sums x once per group and batch row (-136 times it,
//   in shared memory), and each group's four accumulators take it by an FADD where 09 and
//   13 ran 8 more HMMAs a group (half the tensor pipe's work).
// - W in the tiled_pairs layout (the problem's alternative): each word's nibbles s and s + 4
//   are weights 2s and 2s + 1, so a nibble pair meets x's 32-bit word s as it lies in memory
//   (13 permuted x by 16 PRMTs a group);
// - the one-pass path (M <= 8, K <= 4096): warp w takes groups w, w + CWARPS, ... of every
//   tile, so its x fragments and -136 sum x stay in registers for all its tiles.
// Hypothesis: the read near the streaming read's rate, the products hidden under it:
// >= 80 % of the read ceiling at 1 x 28672 x 4096 (13: 68 %), >= 3x cuBLAS BF16 there and at
// 1 x 128256 x 4096.
// What ncu should show: DRAM throughput well above 13's 53 %; long-scoreboard stalls on W
// gone (the consumers wait on mbarriers instead); 8 HMMAs a group, not 16; no PRMT.
// Measured (H200, `kernelbook bench w4a16 13_tiled_w 14_bulk_ring --candidates`, CUPTI
// kernel time; ncu at 1 x 28672 x 4096 under its locked clocks): refuted. The first form
// (one group at a time, x loaded for every group, a barrier of the consumer warps a tile)
// took 38 us at 8 consumer warps and 31 at 11; ncu: the consumers never waited for W, the
// copying lane waited for free slots, ~200 instructions a group (x's loads, their PRMTs and
// addresses, the spin of the waits) at 1.8 instructions a cycle an SM, 3 warps a scheduler
// mostly stalled on fixed-latency dependences ("wait"). With the pair layout, x in
// registers, the x sums' loads first and the barrier replaced by a count: 7.3 M warp
// instructions (from 10.8 M), 23.0 us at 1 x 28672 x 4096 (CWARPS 11, UNRG 2) against 13's
// 22.3 beside it, 85.6 against 83.9 at 1 x 128256. ncu then: the consumers wait for W 8-11 %
// of the samples (the first slot lands ~2 us after the start on every SM at once), "wait"
// stalls 35 %, issue slots 30-37 % busy: the products, ~130 instructions a group in chains
// of 8 dependent HMMAs, are as slow as 13's bursts of loads. Interleaving a warp's groups'
// mma chains (and splitting each in two) gave 24.0: more registers, no fewer stalls. More
// consumer warps (15, 19) did not help either. What is left: the products' latency (the
// mma.sync chain and its dequantization), not the read.
//
// Sizes: any M, N; K a multiple of 128. Launch: grid (min(cdiv(N, 16), SM_COUNT * BLOCKS_SM)),
// block (32 * (CWARPS + 1)), dynamic shared memory 16 STAGES + 1056 STAGES CG
// + (STAGES + 1) (1024 CWARPS + 4) + K / 2 bytes.
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
#ifndef UNRG
#define UNRG 2  // groups a consumer warp computes at once (independent mma chains)
#endif
constexpr int MP = 16;  // batch rows a pass over W: two n8 tiles at most
constexpr int CTHREADS = 32 * CWARPS;

constexpr int NB = STAGES + 1;  // tile sums in progress at once, at most (see consume)

// the dynamic shared memory, carved: barriers, W's ring, the scales' ring, NB tiles' partial
// sums (CWARPS warps x 2 n8 tiles x 4 registers x 32 lanes), -136 sum x per group and batch
// row of the pass, and NB counts of the warps done with a tile
struct BulkRing {
  uint64_t* full;
  uint64_t* empty;
  uint4* w;
  unsigned* s;
  float* part;
  float* xs;
  int* done;
};

__device__ __forceinline__ BulkRing carve(unsigned char* base, int K)
{
  BulkRing r;
  r.full = reinterpret_cast<uint64_t*>(base);
  r.empty = r.full + STAGES;
  r.w = reinterpret_cast<uint4*>(base + 16 * STAGES);
  r.s = reinterpret_cast<unsigned*>(r.w + STAGES * CG * 64);
  r.part = reinterpret_cast<float*>(r.s + STAGES * CG * 8);
  r.xs = r.part + NB * CWARPS * 256;
  r.done = reinterpret_cast<int*>(r.xs + (K / 128) * MP);
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

// -136 times sum x over each group, for batch rows m0 .. m0 + rows, into r.xs (row-major in
// MP): four lanes a (group, row), 32 elements each, XI items a lane's loads in flight at once
constexpr int XI = 2;
__device__ __forceinline__ void x_sums(const BulkRing& r, int M, int K, int m0,
                                       const __nv_bfloat16* __restrict__ x)
{
  const int rows = min(MP, M - m0), items = (K / 128) * rows, sub = threadIdx.x % 4;
  for (int base = 0; base < items; base += XI * (CTHREADS / 4)) {
    uint4 v[XI][4];
#pragma unroll
    for (int k = 0; k < XI; ++k) {  // every load first
      const int item = base + k * (CTHREADS / 4) + threadIdx.x / 4;
      const int gi = item / rows, m = m0 + item % rows;
      const uint4* p = reinterpret_cast<const uint4*>(x + (size_t)m * K + gi * 128 + 32 * sub);
#pragma unroll
      for (int i = 0; i < 4; ++i) v[k][i] = item < items ? __ldg(p + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < XI; ++k) {
      const int item = base + k * (CTHREADS / 4) + threadIdx.x / 4;
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const unsigned u[4] = {v[k][i].x, v[k][i].y, v[k][i].z, v[k][i].w};
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s += __uint_as_float(u[e] << 16) + __uint_as_float(u[e] & 0xFFFF0000u);
      }
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (sub == 0 && item < items) r.xs[(item / rows) * MP + item % rows] = -136.0f * s;
    }
  }
}

// acc[j] += the products of G groups (slot pieces i[u] of slot `slot`, groups gi[u]) with
// batch rows m0 + 8 j + g: 09's, without the zero point's mmas (the weights as 128 + q,
// then -136 sum x from r.xs), scaled. The G groups' mma chains are independent and
// interleaved, so that a warp has G of them in flight.
template <int G, int MT>
__device__ __forceinline__ void group_products(float (&acc)[MT][4], const BulkRing& r, int slot,
                                               const int (&i)[G], const int (&gi)[G], int M,
                                               int K, int m0, const __nv_bfloat16* __restrict__ x)
{
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint4 qa[G], qb[G];
  unsigned sc[G];
  float c[G][MT][4];
#pragma unroll
  for (int u = 0; u < G; ++u) {
    const uint4* wp = r.w + (slot * CG + i[u]) * 64;
    qa[u] = wp[lane];
    qb[u] = wp[32 + lane];
    sc[u] = r.s[(slot * CG + i[u]) * 8 + g];
#pragma unroll
    for (int j = 0; j < MT; ++j) c[u][j][0] = c[u][j][1] = c[u][j][2] = c[u][j][3] = 0.0f;
  }
#pragma unroll
  for (int w = 0; w < 4; ++w)
#pragma unroll
    for (int u = 0; u < G; ++u) {
      const unsigned ua = w == 0 ? qa[u].x : w == 1 ? qa[u].y : w == 2 ? qa[u].z : qa[u].w;
      const unsigned ub = w == 0 ? qb[u].x : w == 1 ? qb[u].y : w == 2 ? qb[u].z : qb[u].w;
      const unsigned a[2][4] = {
          {nib_biased<0>(ua), nib_biased<0>(ub), nib_biased<1>(ua), nib_biased<1>(ub)},
          {nib_biased<2>(ua), nib_biased<2>(ub), nib_biased<3>(ua), nib_biased<3>(ub)}};
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        // this lane's batch row of the B fragment; past M, row M - 1 again: those columns of
        // C are never stored, so no predicated load (and no zeroing of its registers)
        const int m = min(m0 + 8 * j + g, M - 1);
        const uint4* xr =
            reinterpret_cast<const uint4*>(x + (size_t)m * K + gi[u] * 128 + 32 * t);
        const uint4 xv = __ldg(xr + w);
        // tiled_pairs: nibbles s and s + 4 are weights 2s and 2s + 1, x's word s as it lies
        mma_bf16(c[u][j], a[0][0], a[0][1], a[0][2], a[0][3], xv.x, xv.y);
        mma_bf16(c[u][j], a[1][0], a[1][1], a[1][2], a[1][3], xv.z, xv.w);
      }
    }
#pragma unroll
  for (int u = 0; u < G; ++u) {
    const float sa = __uint_as_float(sc[u] << 16), sb = __uint_as_float(sc[u] & 0xFFFF0000u);
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      // C columns 2t and 2t + 1 are batch rows m0 + 8 j + 2t, + 1
      const float* z = r.xs + gi[u] * MP + 8 * j + 2 * t;
      const float z0 = z[0], z1 = z[1];
      acc[j][0] = fmaf(sa, c[u][j][0] + z0, acc[j][0]);  // rows g, g + 8: their group's scale
      acc[j][1] = fmaf(sa, c[u][j][1] + z1, acc[j][1]);
      acc[j][2] = fmaf(sb, c[u][j][2] + z0, acc[j][2]);
      acc[j][3] = fmaf(sb, c[u][j][3] + z1, acc[j][3]);
    }
  }
}

// this warp's partial sums of tile `tile` into its place of the tile's buffer (tc % NB), and
// the last of the CWARPS warps to be done sums them all and stores y. No barrier: a warp is
// never more than STAGES slots ahead of the slowest (the ring), so at most STAGES + 1 tiles
// are being summed; and the summing warp clears the count before it frees the tile's last
// slot, which any warp reaching the buffer's next tile has waited for (mbarrier release,
// acquire).
template <int MT>
__device__ __forceinline__ void add_tile(const BulkRing& r, const float (&acc)[MT][4], int tc,
                                         int tile, int M, int N, int m0,
                                         __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  float* part = r.part + (tc % NB) * CWARPS * 256;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) part[(warp * 8 + j * 4 + q) * 32 + lane] = acc[j][q];
  __threadfence_block();  // the partials before the count
  __syncwarp();  // ... every lane's, before lane 0 counts the warp
  int last = 0;
  if (lane == 0) last = atomicAdd(&r.done[tc % NB], 1) == CWARPS - 1;
  if (__shfl_sync(0xffffffffu, last, 0)) {
    __threadfence_block();  // every warp's partials seen
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float s = 0.0f;
        for (int w = 0; w < CWARPS; ++w) s += part[(w * 8 + j * 4 + q) * 32 + lane];
        const int n = tile * 16 + g + (q < 2 ? 0 : 8), m = m0 + 8 * j + 2 * t + q % 2;
        if (n < N && m < M) y[(size_t)m * N + n] = __float2bfloat16_rn(s);
      }
    if (lane == 0) r.done[tc % NB] = 0;
  }
}

// a pass of the consumer warps over the block's tiles, batch rows m0 .. m0 + 8 MT
template <int MT>
__device__ __forceinline__ void consume(const BulkRing& r, unsigned& it, unsigned& dealt, int& tc,
                                        int M, int N, int K, int m0,
                                        const __nv_bfloat16* __restrict__ x,
                                        __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int groups = K / 128, T = (N + 15) / 16;
  int t0, t1;
  tile_run(T, t0, t1);
  if (m0 > 0) named_sync<CTHREADS>(1);  // every warp done with the last pass's sums of x
  x_sums(r, M, K, m0, x);
  named_sync<CTHREADS>(1);  // the sums (and, on the first pass, the cleared counts) in place
  for (int tile = t0; tile < t1; ++tile, ++tc) {
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
      int i = first;
      for (; i + (UNRG - 1) * CWARPS < n; i += UNRG * CWARPS) {  // UNRG groups at once
        int is[UNRG], gis[UNRG];
#pragma unroll
        for (int u = 0; u < UNRG; ++u) is[u] = i + u * CWARPS, gis[u] = g0 + is[u];
        group_products<UNRG, MT>(acc, r, slot, is, gis, M, K, m0, x);
      }
      for (; i < n; i += CWARPS) {  // the rest one at a time (the same for the whole warp)
        const int is[1] = {i}, gis[1] = {g0 + i};
        group_products<1, MT>(acc, r, slot, is, gis, M, K, m0, x);
      }
      if (g0 + CG >= groups) add_tile<MT>(r, acc, tc, tile, M, N, m0, y);  // the tile's last
      __syncwarp();
      if (lane == 0) mbar_arrive(&r.empty[slot]);  // this warp is done with the slot
    }
  }
}

// The one-pass path (M <= 8, a tile's groups in one slot, at most XG a warp: K <= 4096 at
// every CWARPS tuned): warp w takes groups w, w + CWARPS, ... of every tile, the same for all
// the block's tiles, so its B fragments (x's 16 bytes a lane and group) and the groups' -136
// sum x stay in registers for the whole pass: a group costs its two 16-byte LDS and one
// 4-byte LDS of W and scales, 56 integer instructions, 8 HMMAs and 8 FP32 ones, and the
// warp's XG groups of a tile are XG independent mma chains.
#ifndef XG
#define XG ((32 + CWARPS - 1) / CWARPS)
#endif
__device__ __forceinline__ bool held_path(int M, int K)
{
  return M <= 8 && K / 128 <= CG && K / 128 <= XG * CWARPS;
}

__device__ __forceinline__ void consume_held(const BulkRing& r, int M, int N, int K,
                                             const __nv_bfloat16* __restrict__ x,
                                             __nv_bfloat16* __restrict__ y)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int groups = K / 128, T = (N + 15) / 16;
  int t0, t1;
  tile_run(T, t0, t1);
  x_sums(r, M, K, 0, x);
  named_sync<CTHREADS>(1);  // the sums (and the cleared counts) in place
  uint4 xh[XG][4];
  float z0[XG], z1[XG];
  const int m = min(g, M - 1);  // this lane's batch row of the B fragment (past M: M - 1)
#pragma unroll
  for (int k = 0; k < XG; ++k) {
    const int gi = min(warp + k * CWARPS, groups - 1);
    const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)m * K + gi * 128 + 32 * t);
#pragma unroll
    for (int w = 0; w < 4; ++w) xh[k][w] = __ldg(xr + w);
    z0[k] = r.xs[gi * MP + 2 * t];  // C columns 2t and 2t + 1
    z1[k] = r.xs[gi * MP + 2 * t + 1];
  }
  unsigned it = 0;
  for (int tile = t0; tile < t1; ++tile, ++it) {
    const int slot = it % STAGES;
    float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    mbar_wait(&r.full[slot], (it / STAGES) & 1u);
    float c[XG][4];
    unsigned sc[XG];
#pragma unroll
    for (int k = 0; k < XG; ++k) {
      c[k][0] = c[k][1] = c[k][2] = c[k][3] = 0.0f;
      const int gi = warp + k * CWARPS;
      if (gi < groups) {  // the same for the whole warp
        const uint4* wp = r.w + (slot * CG + gi) * 64;
        const uint4 qa = wp[lane], qb = wp[32 + lane];
        sc[k] = r.s[(slot * CG + gi) * 8 + g];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const unsigned ua = w == 0 ? qa.x : w == 1 ? qa.y : w == 2 ? qa.z : qa.w;
          const unsigned ub = w == 0 ? qb.x : w == 1 ? qb.y : w == 2 ? qb.z : qb.w;
          // tiled_pairs: nibbles s and s + 4 are weights 2s and 2s + 1, x's word s
          mma_bf16(c[k], nib_biased<0>(ua), nib_biased<0>(ub), nib_biased<1>(ua),
                   nib_biased<1>(ub), xh[k][w].x, xh[k][w].y);
          mma_bf16(c[k], nib_biased<2>(ua), nib_biased<2>(ub), nib_biased<3>(ua),
                   nib_biased<3>(ub), xh[k][w].z, xh[k][w].w);
        }
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&r.empty[slot]);  // W and the scales are in registers
#pragma unroll
    for (int k = 0; k < XG; ++k)
      if (warp + k * CWARPS < groups) {
        const float sa = __uint_as_float(sc[k] << 16), sb = __uint_as_float(sc[k] & 0xFFFF0000u);
        acc[0][0] = fmaf(sa, c[k][0] + z0[k], acc[0][0]);
        acc[0][1] = fmaf(sa, c[k][1] + z1[k], acc[0][1]);
        acc[0][2] = fmaf(sb, c[k][2] + z0[k], acc[0][2]);
        acc[0][3] = fmaf(sb, c[k][3] + z1[k], acc[0][3]);
      }
    add_tile<1>(r, acc, tile - t0, tile, M, N, 0, y);
  }
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
  const BulkRing r = carve(smem, K);
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
  if (threadIdx.x < NB) r.done[threadIdx.x] = 0;
  if (held_path(M, K)) {
    consume_held(r, M, N, K, x, y);
    return;
  }
  unsigned it = 0, dealt = 0;  // slots and groups so far
  int tc = 0;  // tiles so far
  for (int m0 = 0; m0 < M; m0 += MP) {
    if (M - m0 <= 8) consume<1>(r, it, dealt, tc, M, N, K, m0, x, y);
    else consume<2>(r, it, dealt, tc, M, N, K, m0, x, y);
  }
}

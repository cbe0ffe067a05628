// The Hopper (sm_90a) attention forward body shared by steps 07 and later (each step's .cu
// file sets its switches and says what it changes). ABI: see src/kernelbook/problems/
// attention.py; the tensor maps of Q, K and V (rows B*H*S, columns D, bf16, boxes of 64
// columns with the 128-byte swizzle) come after the problem's arguments (config `tma:`).
//
// One block owns BM = 128 consecutive queries of one (b, h): two warpgroups, 64 query rows
// each. Q, and each BN-key tile of K and V, arrive by TMA into shared memory as D / 64
// column halves of rows x 64 bf16 (128 bytes a row, 16-byte chunk c of row r at c ^ (r % 8)),
// completing on mbarriers; K and V tiles go round a ring of STAGES stages, thread 0 refilling
// a stage once both warpgroups are done with it.
//
// S = Q·Kᵀ is wgmma m64nBNk16 with both operands K-major in shared memory (the hgemm
// descriptor, sm90.cuh: the k-th 16-column slice of a half starts 32 * k bytes in). The
// online softmax runs on S's accumulators, whose layout is that of wgmma's register A
// operand: P, rounded to bf16, feeds O += P·V as wgmma m64nDk16 with A from registers. V is
// [keys][D] in shared memory, D contiguous: B of P·V is N-major ("MN-major", transposed,
// imm-trans-b = 1), whose 128-byte-swizzled descriptor reads, along N, 64 contiguous
// elements a row and the next 64 at the leading byte offset (the next half: BN * 128
// bytes), and along K (the keys) rows 128 bytes apart within a group of 8 and the next group
// at the stride byte offset (1024 bytes). The 16-key slice k starts 16 * 128 * k bytes in.
//
// Switches (defines): FA3_WS (0: every warpgroup computes and thread 0 refills a stage after a
// block barrier, step 07; 1: warpgroup 0 is a producer that only issues the TMA copies, the
// others compute and free each stage with an mbarrier arrive, setmaxnreg moving registers
// from the producer to them, step 08), FA3_PINGPONG (with FA3_WS and two computing
// warpgroups: they take turns at the tensor core, each issuing its S = Q·Kᵀ only after the
// other has issued its, on two named barriers, so that one's softmax runs while the other's
// GEMMs do, step 09), FA3_OVERLAP (with FA3_WS: the loop is software-pipelined inside each
// warpgroup: S(j) = Q·K(j)ᵀ and O += P(j-1)·V(j-1) are issued together, the softmax of S(j)
// runs while P(j-1)·V(j-1) is in flight, and O is rescaled once that product lands; K and V
// stages are freed on barriers of their own, K as soon as S(j) is done, step 10),
// FA3_FAST_EXP (the softmax's 2^x as one MUFU.EX2, denormal results flushed: step 11),
// FA3_POLY_EXP = n (with FA3_OVERLAP: in a tile with no masked key, every n-th pair of the
// softmax's exp2s by exp2_fma.cuh's cubic on the FP32 pipe instead of the MUFU: step 13).
// FA3_PERSISTENT (with FA3_OVERLAP: a block computes every gridDim.x-th query tile, Q in two
// buffers, the K/V ring's counter running on across tiles, so that the next tile's loads go
// under this one's end: step 15).
// BM = 192 gives three computing warpgroups, which take their turns round (step 14), and
// FA3_HEAD_DIM = 64 or 128 compiles one head size's body only (the other's launches do
// nothing: the config's `requires` skips those sizes).
//
// Rows past S: a tile of K or V that runs past a sequence's end reads the next (b, h)'s rows
// (or zeros past the tensor's end, TMA's out-of-bounds fill); those keys are masked to -inf
// before the softmax, so their P is 0 and their V rows add nothing. Query rows past S are
// computed and not stored.
#pragma once
#include <type_traits>

#include "../hgemm/sm90.cuh"
#include "exp2_fma.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef FA3_WS
#define FA3_WS 0
#endif
#ifndef FA3_PINGPONG
#define FA3_PINGPONG 0
#endif
#ifndef FA3_OVERLAP
#define FA3_OVERLAP 0
#endif
#ifndef FA3_FAST_EXP
#define FA3_FAST_EXP 0
#endif
#ifndef FA3_POLY_EXP
#define FA3_POLY_EXP 0
#endif
#ifndef FA3_PERSISTENT
#define FA3_PERSISTENT 0
#endif
#ifndef FA3_HEAD_DIM
#define FA3_HEAD_DIM 0  // 0: bodies for D = 64 and 128; 64 or 128: that one only
#endif

namespace fa3 {

constexpr int CONSUMERS = BM / 64;                 // warpgroups that compute, 64 rows each
constexpr int NT = (CONSUMERS + FA3_WS) * 128;     // + the producer warpgroup (FA3_WS)
static_assert(BM % 64 == 0 && BM <= 256, "one warpgroup per 64 query rows");
static_assert(BN == 64 || BN == 128, "S tile: wgmma m64n64 or m64n128");
static_assert(STAGES >= 1 && STAGES <= 4, "K/V ring");
static_assert(!FA3_PINGPONG || (FA3_WS && (CONSUMERS == 2 || CONSUMERS == 3)),
              "ping-pong: two or three computing warpgroups, taking turns round");
// registers a thread after setmaxnreg (65536 in all): the producer's 24, the rest shared by
// the computing warpgroups (a multiple of 8: 240 for two, 160 for three)
constexpr int CONSUMER_REGS = CONSUMERS == 2 ? 240 : CONSUMERS == 3 ? 160 : 240;
static_assert(!FA3_WS || 128 * (24 + CONSUMERS * CONSUMER_REGS) <= 65536, "register file");
static_assert(!FA3_OVERLAP || FA3_WS, "intra-warpgroup overlap: a producer warpgroup");
static_assert(!FA3_POLY_EXP || FA3_OVERLAP, "the FP32-pipe exp2s are in the overlapped softmax");
static_assert(!FA3_PERSISTENT || FA3_OVERLAP, "persistent: the overlapped loop's barriers");
// Q buffers: a persistent block loads the next query tile's Q while it computes this one's
constexpr int QBUF = FA3_PERSISTENT ? 2 : 1;
constexpr int POLY_N = FA3_POLY_EXP > 0 ? FA3_POLY_EXP : 1;  // every POLY_N-th pair

// named barriers 1 .. CONSUMERS (0 is __syncthreads): computing warpgroup c waits on 1 + c
// for its turn at the tensor core, and hands the turn on by arriving on the next one's
// (c + 1, round), so the warpgroups issue their GEMMs in turn 0, 1, .., 0, ...
KB_DEVICE void turn_wait(int c) {
  asm volatile("bar.sync %0, 256;" ::"r"(1 + c) : "memory");
}
KB_DEVICE void turn_pass(int c) {
  asm volatile("bar.arrive %0, 256;" ::"r"(1 + (c + 1) % CONSUMERS) : "memory");
}

// the descriptor of a B operand stored N-major ([K rows][N], N contiguous) in 128-byte
// swizzled halves of 64 columns, `half_bytes` apart
KB_DEVICE uint64_t sw128_desc_nmajor(const void* tile, uint32_t half_bytes) {
  uint64_t addr = smem_u32(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t((half_bytes >> 4) & 0x3FFF) << 16) |
         (64ull << 32) | (1ull << 62);
}

// D(64 x N, fp32) += A(64 x 16, registers, bf16) * B(16 x N, smem, N-major: transposed)
template <int N>
KB_DEVICE void wgmma_rs_tb(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d = 1);

template <>
KB_DEVICE void wgmma_rs_tb<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d)
      : "memory");
}

template <>
KB_DEVICE void wgmma_rs_tb<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d)
      : "memory");
}

// 2^x for the softmax: exp2f, whose results below 2^-126 (denormals) cost a compare and two
// predicated multiplies around each MUFU.EX2; with FA3_FAST_EXP the MUFU.EX2 alone
// (ex2.approx.ftz), those results flushed to zero (a P under 2^-126 rounds to nothing in a
// row sum of at least 1 anyway; step 11)
KB_DEVICE float exp2_softmax(float x) {
#if FA3_FAST_EXP
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

KB_DEVICE uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <int D>
struct Smem {
  static constexpr int HALVES = D / 64;
  static constexpr int Q_BYTES = BM * D * 2;
  static constexpr int KV_BYTES = BN * D * 2;  // one K or V tile
  static constexpr int BYTES = QBUF * Q_BYTES + 2 * STAGES * KV_BYTES;
};

// load rows [row, row + rows) of a [rows_total][D] matrix as D / 64 swizzled halves
KB_DEVICE void load_halves(uint8_t* dst, const CUtensorMap* map, uint64_t* bar, int row,
                           int halves, int rows) {
  for (int h = 0; h < halves; ++h) tma_load(dst + h * rows * 128, map, bar, 64 * h, row);
}

// query block x of (b, h) bh, from the last block when causal (the last blocks have the most
// key tiles: they start first)
struct Tile {
  int q0, row0, ntiles;  // first query, the (b, h)'s first row in the tensor maps, key tiles
};
KB_DEVICE Tile tile_of(int x, int bh, int nq, int S, int causal) {
  const int qblock = causal ? nq - 1 - x : x;
  Tile t{qblock * BM, bh * S, (S + BN - 1) / BN};
  if (causal) t.ntiles = min(t.ntiles, (t.q0 + BM + BN - 1) / BN);
  return t;
}

template <int D>
KB_DEVICE void body(int S, int BH, float scale, int causal, __nv_bfloat16* O, float* L,
                    const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                    uint8_t* smem, uint64_t* qbar, uint64_t* qfree, uint64_t* kbar,
                    uint64_t* vbar, uint64_t* kfree, uint64_t* vfree) {
  using SM = Smem<D>;
  constexpr int HALVES = SM::HALVES;
  const int tid = threadIdx.x, warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  // the query tiles this block computes: with FA3_PERSISTENT every gridDim.x-th of the
  // cdiv(S, BM) * B * H from blockIdx.x, tile i being query block i % nq of (b, h) i / nq;
  // else one, query block blockIdx.x of (b, h) blockIdx.y
  const int nq = (S + BM - 1) / BM;
  const int first = FA3_PERSISTENT ? blockIdx.x : 0, total = FA3_PERSISTENT ? nq * BH : 1;
  const int stride = FA3_PERSISTENT ? gridDim.x : 1;
  auto tile_at = [&](int i) {
    return FA3_PERSISTENT ? tile_of(i % nq, i / nq, nq, S, causal)
                          : tile_of(blockIdx.x, blockIdx.y, nq, S, causal);
  };

  uint8_t* sK = smem + QBUF * SM::Q_BYTES;
  uint8_t* sV = sK + STAGES * SM::KV_BYTES;

  if (tid == 0) {
    tma_prefetch_descriptor(tmQ);
    tma_prefetch_descriptor(tmK);
    tma_prefetch_descriptor(tmV);
    for (int b = 0; b < QBUF; ++b) {
      mbar_init(&qbar[b], 1);
      mbar_init(&qfree[b], CONSUMERS * 4);  // one arrive per computing warp (FA3_PERSISTENT)
    }
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&kbar[s], 1);
      mbar_init(&vbar[s], 1);
      mbar_init(&kfree[s], CONSUMERS * 4);  // one arrive per computing warp (FA3_WS)
      mbar_init(&vfree[s], CONSUMERS * 4);  // (FA3_OVERLAP; before, kfree frees K and V)
    }
    fence_barrier_init();
  }
  __syncthreads();

  // the ring's n-th K (or V) tile into stage n % STAGES (n counts across the block's query
  // tiles), rows [row, row + BN), each completing on its own barrier
  auto load_k = [&](int n, int row) {
    const int st = n % STAGES;
    mbar_expect_tx(&kbar[st], SM::KV_BYTES);
    load_halves(sK + st * SM::KV_BYTES, tmK, &kbar[st], row, HALVES, BN);
  };
  auto load_v = [&](int n, int row) {
    const int st = n % STAGES;
    mbar_expect_tx(&vbar[st], SM::KV_BYTES);
    load_halves(sV + st * SM::KV_BYTES, tmV, &vbar[st], row, HALVES, BN);
  };
  auto load_q = [&](int qb, const Tile& tl) {
    mbar_expect_tx(&qbar[qb], SM::Q_BYTES);
    load_halves(smem + qb * SM::Q_BYTES, tmQ, &qbar[qb], tl.row0 + tl.q0, HALVES, BM);
  };

#if FA3_WS
  if (tid < 128) {  // the producer warpgroup: one thread issues every copy
    setmaxnreg_dec<24>();
    if (tid == 0) {
      int n = 0;  // K and V tiles into the ring so far
      for (int i = first, u = 0; i < total; i += stride, ++u) {
        const Tile tl = tile_at(i);
        // Q buffer u % QBUF last held query tile u - QBUF: wait until every warp is done
        if (u >= QBUF) mbar_wait(&qfree[u % QBUF], (u / QBUF - 1) & 1);
        load_q(u % QBUF, tl);
        for (int j = 0; j < tl.ntiles; ++j, ++n) {
          // stage n % STAGES last held tile n - STAGES: wait until every computing warp is done
          const uint32_t parity = (n / STAGES - 1) & 1;
          if (n >= STAGES) mbar_wait(&kfree[n % STAGES], parity);
          load_k(n, tl.row0 + j * BN);
          if (FA3_OVERLAP && n >= STAGES) mbar_wait(&vfree[n % STAGES], parity);
          load_v(n, tl.row0 + j * BN);
        }
      }
    }
    return;
  }
  setmaxnreg_inc<CONSUMER_REGS>();
  const int wg = tid / 128 - 1;  // this computing warpgroup's 64 query rows
#else
  if (tid == 0) {  // one query tile a block: Q and the ring's first stages
    const Tile tl = tile_at(0);
    load_q(0, tl);
    for (int j = 0; j < STAGES && j < tl.ntiles; ++j) {
      load_k(j, tl.row0 + j * BN);
      load_v(j, tl.row0 + j * BN);
    }
  }
  const int wg = tid / 128;
#endif
  const float sl2 = scale * 1.4426950408889634f;  // scores in the log2 domain

  // one query tile: its K and V tiles are the ring's n0-th onwards, its Q in buffer qb
  // (complete at parity qphase)
  auto compute_tile = [&](const Tile& tl, const int n0, const int qb, const uint32_t qphase) {
    const int q0 = tl.q0, row0 = tl.row0, ntiles = tl.ntiles;
    const uint8_t* sQ = smem + qb * SM::Q_BYTES;
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float s[BN / 2];
    uint32_t pa[BN / 16][4];  // P as bf16 A fragments
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int qrow = q0 + 64 * wg + 16 * warp + g;  // this thread's rows: qrow, qrow + 8
    const uint8_t* qw = sQ + wg * 64 * 128;          // this warpgroup's 64 rows of each half
    // key tile j's stage in the ring, and the parity its barriers complete at
    auto stage = [&](int j) { return (n0 + j) % STAGES; };
    auto phase = [&](int j) { return uint32_t((n0 + j) / STAGES) & 1; };

    // S = Q·Kᵀ of the K tile in stage st: D / 16 wgmmas, the k-th from half k / 4 at
    // 32 * (k % 4) bytes (issued, not waited for)
    auto issue_s = [&](int st) {
      const uint8_t* tK = sK + st * SM::KV_BYTES;
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        const int h = k / 4, c = 32 * (k % 4);
        wgmma_bf16<BN>(s, sw128_desc(qw + h * BM * 128 + c), sw128_desc(tK + h * BN * 128 + c),
                       k > 0);
      }
    };
    // O += P·V of the V tile in stage st: BN / 16 wgmmas, V's 16-key slice k at 2048 * k bytes
    auto issue_pv = [&](int st, const uint32_t(&p)[BN / 16][4]) {
      const uint8_t* tV = sV + st * SM::KV_BYTES;
#pragma unroll
      for (int k = 0; k < BN / 16; ++k)
        wgmma_rs_tb<D>(o, p[k], sw128_desc_nmajor(tV + 2048 * k, BN * 128));
    };
    // the online softmax's new row maxima from this tile's scores (get(i): score i, masked):
    // m moves on, mu is what the tile's exponents subtract, alpha O's rescaling factor
    auto new_max = [&](auto get, float(&alpha)[2], float(&mu)[2]) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
          mx = fmaxf(mx, fmaxf(get(4 * n + 2 * h), get(4 * n + 2 * h + 1)));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m[h], mx * sl2);
        mu[h] = mn == -INFINITY ? 0.f : mn;  // a row with nothing unmasked yet
        alpha[h] = exp2_softmax(m[h] - mu[h]);
        m[h] = mn;
      }
    };
    // tile j's scores in s -> P in s: masked, then the online softmax of each of the thread's
    // two rows; m and l move on, O's rescaling factor is left in alpha
    auto softmax = [&](int j, float(&alpha)[2]) {
      // mask keys past S, and above the diagonal when causal, in the tiles that need it
      const int k0 = j * BN;
      if (k0 + BN > S || (causal && k0 + BN - 1 > q0 + 64 * wg + 16 * warp)) {
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int kj = k0 + 8 * n + 2 * t + (e & 1);
            const int qi = qrow + 8 * (e >> 1);
            if (kj >= S || (causal && kj > qi)) s[4 * n + e] = -INFINITY;
          }
      }
      float mu[2];
      new_max([&](int i) { return s[i]; }, alpha, mu);
      float rs[2] = {0.f, 0.f};
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) {
        const float p = exp2_softmax(s[i] * sl2 - mu[(i >> 1) & 1]);
        s[i] = p;
        rs[(i >> 1) & 1] += p;
      }
      l[0] = l[0] * alpha[0] + rs[0];
      l[1] = l[1] * alpha[1] + rs[1];
    };
#if FA3_OVERLAP
    // softmax() for a P·V still in flight: the same arithmetic, but S's registers are only
    // read (the mask applied as they are read) and P goes straight to bf16 fragments pb.
    // ptxas waits for every outstanding wgmma before the first write to any accumulator
    // register, so writing P over S would end the overlap there.
    auto softmax_packed = [&](int j, float(&alpha)[2], uint32_t(&pb)[BN / 16][4]) {
      const int k0 = j * BN;
      auto run = [&](auto masked) {
        constexpr bool MASK = decltype(masked)::value;
        // element i = 4n + e: key k0 + 8n + 2t + (e & 1), query row qrow + 8 (e >> 1)
        auto val = [&](int i) {
          if (MASK) {
            const int kj = k0 + 8 * (i / 4) + 2 * t + (i & 1);
            const int qi = qrow + 8 * ((i >> 1) & 1);
            if (kj >= S || (causal && kj > qi)) return -INFINITY;
          }
          return s[i];
        };
        float mu[2];
        new_max(val, alpha, mu);
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int k = 0; k < BN / 16; ++k)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int i = 8 * k + 2 * q;
            // FA3_POLY_EXP: every n-th pair of an unmasked tile off the MUFU (a masked key's
            // -inf stays the MUFU's, which makes it exactly 0)
            const bool fma_pipe =
                !MASK && FA3_POLY_EXP > 0 && (4 * k + q) % POLY_N == POLY_N - 1;
            const float p0 = fma_pipe ? exp2_fma(val(i) * sl2 - mu[q & 1])
                                      : exp2_softmax(val(i) * sl2 - mu[q & 1]);
            const float p1 = fma_pipe ? exp2_fma(val(i + 1) * sl2 - mu[q & 1])
                                      : exp2_softmax(val(i + 1) * sl2 - mu[q & 1]);
            rs[q & 1] += p0 + p1;
            pb[k][q] = pack_bf16(p0, p1);
          }
        l[0] = l[0] * alpha[0] + rs[0];
        l[1] = l[1] * alpha[1] + rs[1];
      };
      if (k0 + BN > S || (causal && k0 + BN - 1 > q0 + 64 * wg + 16 * warp))
        run(std::true_type{});
      else
        run(std::false_type{});
    };
#endif
    auto rescale_o = [&](const float(&alpha)[2]) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
    };
    // P to bf16 A fragments: 16-key slice k is S's column blocks 2k and 2k + 1
    auto pack_p = [&]() {
#pragma unroll
      for (int k = 0; k < BN / 16; ++k) {
        pa[k][0] = pack_bf16(s[8 * k + 0], s[8 * k + 1]);
        pa[k][1] = pack_bf16(s[8 * k + 2], s[8 * k + 3]);
        pa[k][2] = pack_bf16(s[8 * k + 4], s[8 * k + 5]);
        pa[k][3] = pack_bf16(s[8 * k + 6], s[8 * k + 7]);
      }
    };

    // one turn at the tensor core: wait for it (FA3_PINGPONG), fence the registers the wgmmas
    // read and write, issue them (issue() commits its groups), and hand the turn on while they
    // run
    auto at_tensor_core = [&](auto issue) {
#if FA3_PINGPONG
      turn_wait(wg);
#endif
      wgmma_fence();
      issue();
#if FA3_PINGPONG
      turn_pass(wg);
#endif
    };

    mbar_wait(&qbar[qb], qphase);
#if FA3_OVERLAP
    // prologue: S(0) alone and its softmax (O is still zero: nothing to rescale)
    {
      float alpha[2];
      mbar_wait(&kbar[stage(0)], phase(0));
      at_tensor_core([&] {
        issue_s(stage(0));
        wgmma_commit();
      });
      wgmma_wait<0>();
      keep_in_registers(s);
      if (lane == 0) mbar_arrive(&kfree[stage(0)]);
      softmax(0, alpha);
      pack_p();
    }
    // tile j: S(j) and P(j-1)·V(j-1) in flight together, S(j)'s softmax under the product.
    // P(j-1) (in `prev`) is read by the product until it lands, so P(j) goes to the other
    // buffer (`next`): the loop is unrolled by two, the buffers swapping names, no copies.
    uint32_t pb[BN / 16][4];
    auto step = [&](int j, const uint32_t(&prev)[BN / 16][4], uint32_t(&next)[BN / 16][4]) {
      const int st = stage(j), pst = stage(j - 1);
      float alpha[2];
      mbar_wait(&kbar[st], phase(j));
      mbar_wait(&vbar[pst], phase(j - 1));
      at_tensor_core([&] {
        issue_s(st);
        wgmma_commit();
        issue_pv(pst, prev);
        wgmma_commit();
      });
      wgmma_wait<1>();  // S(j) has landed; P(j-1)·V(j-1) may still run
      keep_in_registers(s);
      if (lane == 0) mbar_arrive(&kfree[st]);
      softmax_packed(j, alpha, next);
      wgmma_wait<0>();  // the product has landed: O may be rescaled
      keep_in_registers(o);
      if (lane == 0) mbar_arrive(&vfree[pst]);
      rescale_o(alpha);
    };
    int j = 1;
    for (; j + 1 < ntiles; j += 2) {
      step(j, pa, pb);
      step(j + 1, pb, pa);
    }
    const bool last_in_pb = j < ntiles;
    if (last_in_pb) step(j, pa, pb);
    // epilogue: the last tile's P·V
    {
      const int pst = stage(ntiles - 1);
      mbar_wait(&vbar[pst], phase(ntiles - 1));
      at_tensor_core([&] {
        if (last_in_pb)
          issue_pv(pst, pb);
        else
          issue_pv(pst, pa);
        wgmma_commit();
      });
      wgmma_wait<0>();
      keep_in_registers(o);
#if FA3_PERSISTENT
      // every wgmma of this warp that reads Q has landed: the producer may refill the buffer
      // (and this tile's last V stage, freed only for the next query tile's loads)
      if (lane == 0) {
        mbar_arrive(&qfree[qb]);
        mbar_arrive(&vfree[pst]);
      }
#endif
    }
#else
    for (int j = 0; j < ntiles; ++j) {
      const int st = stage(j);
      const uint32_t ph = phase(j);
      float alpha[2];

      mbar_wait(&kbar[st], ph);
      // the other warpgroup's S goes next (FA3_PINGPONG), while this one waits for its own
      at_tensor_core([&] {
        issue_s(st);
        wgmma_commit();
      });
      wgmma_wait<0>();

      softmax(j, alpha);
      rescale_o(alpha);
      pack_p();

      mbar_wait(&vbar[st], ph);
      wgmma_fence();
      issue_pv(st, pa);
      wgmma_commit();
      wgmma_wait<0>();

#if FA3_WS
      if (lane == 0) mbar_arrive(&kfree[st]);  // this warp is done with stage st
#else
      __syncthreads();  // both warpgroups are done with stage st
      if (tid == 0 && j + STAGES < ntiles) {
        load_k(j + STAGES, row0 + (j + STAGES) * BN);
        load_v(j + STAGES, row0 + (j + STAGES) * BN);
      }
#endif
    }
#endif

    // O / l and the logsumexp: a row's sum is spread over its quad
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    __nv_bfloat16* Ot = O + (size_t)row0 * D;
    float* Lt = L + row0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int qi = qrow + 8 * h;
      if (qi >= S) continue;
      const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
      __nv_bfloat16* orow = Ot + (size_t)qi * D;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(orow + 8 * n + 2 * t) =
            pack_bf16(o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv);
      if (t == 0) Lt[qi] = (m[h] + log2f(l[h])) * 0.6931471805599453f;
    }
  };

#if FA3_PINGPONG
  if (wg == CONSUMERS - 1) turn_pass(wg);  // warpgroup 0 goes first
#endif
#if FA3_PERSISTENT
  int n0 = 0;  // the ring's K and V tiles before this query tile's
  for (int i = first, u = 0; i < total; i += stride, ++u) {
    const Tile tl = tile_at(i);
    compute_tile(tl, n0, u % QBUF, (u / QBUF) & 1);
    n0 += tl.ntiles;
  }
#else
  compute_tile(tile_at(0), 0, 0, 0);  // the ring's counter a constant
#endif
}

}  // namespace fa3

// The entry: problem arguments, then the tensor maps of Q, K and V (config `tma:` order)
#define FA3_ENTRY(name)                                                                      \
  extern "C" __global__ void __launch_bounds__(fa3::NT, 1)                                   \
      name(int B, int H, int S, int D, float scale, int causal, const __nv_bfloat16* Q,      \
           const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O, float* L,       \
           const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK, \
           const __grid_constant__ CUtensorMap tmV) {                                        \
    extern __shared__ uint8_t smem_raw[];                                                    \
    /* 128-byte swizzled tiles start on 1024 bytes (the launch asks for 1 KiB extra) */      \
    uint8_t* smem = reinterpret_cast<uint8_t*>(                                              \
        (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));                  \
    /* Q full, Q free (a buffer each); K full, V full; K free, V free (a stage each) */      \
    __shared__ __align__(8) uint64_t bars[2 * fa3::QBUF + 4 * STAGES];                       \
    uint64_t *qbar = bars, *qfree = qbar + fa3::QBUF, *kbar = qfree + fa3::QBUF;             \
    uint64_t *vbar = kbar + STAGES, *kfree = vbar + STAGES, *vfree = kfree + STAGES;         \
    if (FA3_HEAD_DIM != 128 && D == 64)                                                      \
      fa3::body<64>(S, B * H, scale, causal, O, L, &tmQ, &tmK, &tmV, smem, qbar, qfree,      \
                    kbar, vbar, kfree, vfree);                                               \
    else if (FA3_HEAD_DIM != 64 && D == 128)                                                 \
      fa3::body<128>(S, B * H, scale, causal, O, L, &tmQ, &tmK, &tmV, smem, qbar, qfree,     \
                     kbar, vbar, kfree, vfree);                                              \
  }

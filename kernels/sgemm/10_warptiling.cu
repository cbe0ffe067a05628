// 10_warptiling: block tile -> warp tiles -> thread tiles (siboehm kernel 10 style).
//
// Changed from 09: a new level between block and thread. The BM x BN block tile is split into
// (BM/WM) x (BN/WN) warp tiles; a warp walks its WM x WN tile as WMITER x WNITER sub-tiles of
// WSUBM x WSUBN, and in each sub-tile every lane owns a TM x TN patch. In siboehm's shape
// (WM=WN=64, WNITER=4, TM=8, TN=4, 128 threads) each thread holds 8 x 16 = 128 accumulators;
// the config tunes the shape, and ptxas reports no spills. The first space (72 candidates:
// block, warp and thread tiles, 64 or 128 accumulators a thread, 4 or 8 warps, BK 8, 16 or 32,
// PREFETCH, below) found a plateau (worklog through ec90bc9, 4096^3: six candidates within
// 0.4 % of the best, 90.7 % of cuBLAS, all BK 16, no PREFETCH, 64 accumulators, 64x128 or
// 128x128 tiles); the space is now that plateau with TM 4 and the GROUP_M raster added (40).
// The As tile keeps 07's XOR swizzle (stores conflict-free), Bs is plain row-major (a warp's
// regN loads read 4 distinct contiguous float4 = 64 B: conflict-free as is).
// Why it should help: (1) 128 results per thread for 8 + 16 shared words per k: 5.3 FFMA per
// shared word (4 in 06-09); (2) the lanes of a warp share rows/cols of the warp tile, so its
// shared-memory footprint per k is small and mostly broadcast; (3) register-level locality
// maps to warps, which the scheduler issues as units; (4) fewer, fatter threads (128/block,
// 2 blocks/SM) give ILP instead of TLP. ptxas, siboehm's shape: 228 registers/thread (128 accumulators + 24
// fragment registers + addresses), so 2 blocks x 4 warps per SM; forcing 3 blocks
// (MIN_BLOCKS=3, 168 registers) spills, so MIN_BLOCKS defaults to 1.
// What the profiler should show: higher sm__inst_executed_pipe_fma share of all issued
// instructions than 09's best, fewer l1tex__data_pipe_lsu_wavefronts_mem_shared per FFMA, stall
// reasons dominated by "math pipe throttle"/"not selected" rather than mio_throttle; a remaining
// ~2-way read conflict on As (8 distinct threadRows 32 B apart per LDS.128), expected, to be
// confirmed by ncu.
//
// The loop: tile 0 is loaded and stored before it; each iteration computes its tile, then (after
// a barrier) loads the next one and stores it. Measured on the H200 (worklog, 4096^3): the best
// candidate is a 64x128 tile, 4 warps of 64x32, 8x8 a lane: ptxas fits it in 127 registers, so
// 4 blocks = 16 warps per SM, and it ran at 44.4 TFLOP/s, 92.6 % of cuBLAS in its job. The
// loop as first written (load, store, barrier, compute, barrier in one body) needed 157
// registers for the same tile: 3 blocks, 12 warps, 40.6 TFLOP/s (the previous worklog). The
// 128x128 tiles (8 warps, 128 registers, 2 blocks) stay at 42.7-42.8.
//
// PREFETCH (tuned, 0 or 1): with 1, tile t+1's float4s are loaded into registers before tile t
// computes and stored into a second shared stage after it, so the LDG latency overlaps the
// FFMAs inside each warp and a tile needs one barrier instead of two. The cost is registers:
// 16-40 more (ptxas: 167 at 64x128x16, 3 blocks; 151 at 128x128x16, one 256-thread block; BK 8
// with MIN_BLOCKS=2 fits 128 without spills). On the H200 occupancy wins over in-warp latency
// hiding: the best prefetching candidate (64x128x16) ran at 41.9 TFLOP/s, the one-block
// 128x128 ones at 26-33. The worklog's autotuning table keeps every candidate.
// PREFETCH 1 with MIN_BLOCKS 4 (the 64x128 tile, GROUP_M 8) is back in the space: 10's best
// without it (18d7765, ncu at 4096^3) issues in 82 % of cycles, FFMA 88 % of what it issues,
// its stalls short scoreboard (0.47 a issue), long scoreboard (0.36: the LDG between the two
// barriers, with nothing to overlap) and the barrier (0.28). Held to 128 registers, ptxas
// spills 25 words (SASS: ~14 LDL and 2 STL.64 a tile, beside 1024 FFMAs) and keeps the 16
// warps an SM; whether that beats the second barrier's bubble is for the run to measure.
// FULL (not a knob): a block whose tiles all lie inside A, B and C (and K a multiple of BK)
// runs a copy of the loop whose loads have no guards. 10's best tile's loop (ptxas 13.0,
// PREFETCH 0) goes from 1163 instructions a tile to 1124 for its 1024 FFMAs: the 12 CS2R
// that zeroed the registers of a guarded load, 10 LDC reloading M, N and K under register
// pressure, and most of the address IMADs and ISETPs are gone; 126 registers instead of 128.
// ncu should show a higher FFMA share of the instructions issued (88 % -> 91 %).
//
// ZIGZAG (default 1): the FFMAs of a k-step walk the accumulator rows serpentine (odd rows right
// to left), so consecutive FFMAs across a row change share their B operand. Scouted on the H200
// (tools/quick_tune.py, 4096^3, the 48 candidates of the 64x128x16 tile with TM 4/8, GROUP_M 0/8,
// ZIGZAG 0/1, dev run of 2026-12-01): median 87.3 % of cuBLAS without it, 90.3 % with it; the
// best point (WM64 WN32 WNITER1 TM4 TN8 GROUP_M8) 91.7 %. Not yet the 93.7 % target.
//
// LOAD_AT (tuned, 8 or BK = off): tile t+1's loads issue after k-step LOAD_AT of tile t,
// before the barrier that ends it, instead of after that barrier. Why: in ncu at 4096^3 (the
// winner published from f555abb, a 128x128 tile, 2 blocks an SM) 18 % of the warp samples wait on
// the long scoreboard at the A and B stores that follow the loads (the LDG's latency, with the
// barriers on both sides, is only hidden by the other block), issue 0.80 an active cycle
// against cuBLAS's 0.90. Issued inside the tile, the loads fly during the tile's last
// FFMAs and the first barrier's wait. Their 16 registers live that long: the 128x128 tile
// (2 + 2 float4 a thread) fits them in 128 with MIN_BLOCKS 2 and no spills, so the two
// blocks an SM stay; the 64x128 tile (2 + 4) spills at 4 blocks, so it is not in the space.
// A and B are const __restrict__: the compiler takes their loads as invariant and sinks them
// to the stores, past the k-steps and the barrier, so with LOAD_AT < BK they are volatile
// (ld4). ptxas still places them itself, about three k-steps before the tile's end at 128
// registers (the same SASS for LOAD_AT 1..15), which is why the space has one value on.
// Scouted on the H200 (`kernelbook bench --candidates`, 4096^3, the 20 128x128 candidates
// with and without it): every one gained, by 0.8 to 8.4 points (median 5.1); the best 96.4 %
// of cuBLAS (WM64 WN32 WNITER1 TM8 TN8 GROUP_M8) against 92.2 % for the best without
// (10's published winner: 92.5 %). ncu should show
// the long-scoreboard stalls at the STS gone, issue per active cycle up toward 0.9.
//
// Sizes: any M and N remainder and any K remainder (per-float4 guards, zero fill), with
// K % 4 == 0 and N % 4 == 0 for the 16-byte accesses (covers 4096x4096x1000 and 3000^3).
// Launch: grid (cdiv(N, BN), cdiv(M, BM)), block (NUM_THREADS), no dynamic smem.
// Indices are 32-bit: fine while M*K, K*N, M*N < 2^31 (all study sizes).

#ifndef BM
#error "BM must be defined"
#endif
#ifndef BN
#error "BN must be defined"
#endif
#ifndef BK
#error "BK must be defined"
#endif
#ifndef WM
#error "WM must be defined"
#endif
#ifndef WN
#error "WN must be defined"
#endif
#ifndef WNITER
#error "WNITER must be defined"
#endif
#ifndef TM
#error "TM must be defined"
#endif
#ifndef TN
#error "TN must be defined"
#endif
#ifndef NUM_THREADS
#error "NUM_THREADS must be defined"
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1   // optional: minimum resident blocks per SM for __launch_bounds__
#endif
#ifndef PREFETCH
#define PREFETCH 0     // optional: 1 = load tile t+1 into registers while tile t computes
#endif
#ifndef GROUP_M
#define GROUP_M 0      // optional: > 0 = blocks raster in groups of GROUP_M block rows (L2 reuse)
#endif
#ifndef ZIGZAG
#define ZIGZAG 1       // optional: 1 = the FFMAs of a k-step walk the accumulators serpentine
#endif
#ifndef LOAD_AT
#define LOAD_AT BK     // optional: the k-step of tile t after which tile t+1's loads issue (BK: after it)
#endif
#ifndef ASYNC_B
#define ASYNC_B 0      // 16_async_b: B by cp.async, A through registers, one barrier a tile
#endif
#define SMEM_STAGES ((PREFETCH || ASYNC_B) ? 2 : 1)
#if ASYNC_B
#include "../common/cp_async.cuh"
#endif

#define WARPSIZE 32
#define WMITER ((WM) * (WN) / (WARPSIZE * (TM) * (TN) * (WNITER)))
#define WSUBM ((WM) / WMITER)
#define WSUBN ((WN) / (WNITER))

static_assert(NUM_THREADS % WARPSIZE == 0 && NUM_THREADS <= 1024, "NUM_THREADS: whole warps, <= 1024");
static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
static_assert((BM / WM) * (BN / WN) == NUM_THREADS / WARPSIZE, "one warp per warp tile");
static_assert(WMITER >= 1 && (WM * WN) % (WARPSIZE * TM * TN * WNITER) == 0, "WMITER must be a positive integer");
static_assert(WM % WMITER == 0 && WN % WNITER == 0, "warp sub-tiles must tile the warp tile");
static_assert(WSUBN % TN == 0 && WSUBM % TM == 0, "thread tiles must tile the warp sub-tile");
static_assert((WSUBN / TN) * (WSUBM / TM) == WARPSIZE, "32 lanes must exactly cover a warp sub-tile");
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM, TN multiples of 4 (LDS.128 / STG.128)");
static_assert(BK % 4 == 0 && BN % 4 == 0, "float4 loads");
static_assert(NUM_THREADS % (BK / 4) == 0 && BM % (NUM_THREADS / (BK / 4)) == 0,
              "A tile: the float4 loads must cover BM x BK exactly");
static_assert(NUM_THREADS % (BN / 4) == 0 && BK % (NUM_THREADS / (BN / 4)) == 0,
              "B tile: the float4 loads must cover BK x BN exactly");
static_assert(BM % 32 == 0 && BK <= 32 && (128 / BK) % 4 == 0, "As swizzle assumptions (see AS_IDX)");
static_assert(PREFETCH == 0 || PREFETCH == 1, "PREFETCH is 0 or 1");
static_assert(ASYNC_B == 0 || (ASYNC_B == 1 && PREFETCH == 0), "ASYNC_B is 0, or 1 without PREFETCH");
static_assert(GROUP_M >= 0 && (ZIGZAG == 0 || ZIGZAG == 1), "GROUP_M >= 0, ZIGZAG 0 or 1");
static_assert(LOAD_AT >= 1 && LOAD_AT <= BK, "LOAD_AT is a k-step of the tile: 1 .. BK (BK: off)");
static_assert(LOAD_AT == BK || (PREFETCH == 0 && ASYNC_B == 0), "LOAD_AT < BK is the one-stage loop's");
static_assert(SMEM_STAGES * (BM * BK + BK * BN) * 4 <= 48 * 1024, "static shared memory over 48 KiB");

// As: transposed A tile, As[k][m], m XOR-swizzled by the k-quad (as in 07): the scalar transposed
// stores of one warp (128/BK rows x BK/4 k-quads) hit 32 distinct banks; the key is a multiple
// of 4 below 32, so float4 groups stay contiguous and inside the row.
#define AS_IDX(k, m) ((k) * BM + ((m) ^ (((k) / 4) * (128 / BK))))

template <bool B> struct Bool { static constexpr bool value = B; };
template <int I> struct Int { static constexpr int value = I; };

// a float4 of A or B. With LOAD_AT < BK, volatile: the compiler may not sink the load (an
// invariant one, A and B being const __restrict__) past the k-steps to the store that uses it
__device__ __forceinline__ float4 ld4(const float* p)
{
#if LOAD_AT < BK && !defined(KERNELBOOK_EMU)
    float4 v;
    asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
#else
    return *reinterpret_cast<const float4*>(p);
#endif
}

extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
sgemm_warptiling(int M, int N, int K, float alpha, const float* __restrict__ A,
                 const float* __restrict__ B, float beta, float* __restrict__ C)
{
    __shared__ __align__(16) float As[SMEM_STAGES * BK * BM];
    __shared__ __align__(16) float Bs[SMEM_STAGES * BK * BN];

    const int tid = threadIdx.x;
    const int warpIdx = tid / WARPSIZE;
    const int lane = tid % WARPSIZE;
    const int warpCol = warpIdx % (BN / WN);
    const int warpRow = warpIdx / (BN / WN);
    const int threadColInWarp = lane % (WSUBN / TN);
    const int threadRowInWarp = lane / (WSUBN / TN);

    // block -> tile: row-major raster, or (GROUP_M > 0) GROUP_M block rows at a time, column by
    // column, so the blocks resident together share A rows and B columns in L2
    int tileRow = blockIdx.y, tileCol = blockIdx.x;
#if GROUP_M > 0
    {
        const int lin = blockIdx.y * gridDim.x + blockIdx.x;
        const int perGroup = GROUP_M * gridDim.x;
        const int first = (lin / perGroup) * GROUP_M;
        const int rows = min(GROUP_M, (int)gridDim.y - first);
        tileRow = first + (lin % perGroup) % rows;
        tileCol = (lin % perGroup) / rows;
    }
#endif
    const int rowBase = tileRow * BM;
    const int colBase = tileCol * BN;

    const int innerRowA = tid / (BK / 4), innerColA = tid % (BK / 4);
    constexpr int strideA = NUM_THREADS / (BK / 4);
    const int innerRowB = tid / (BN / 4), innerColB = tid % (BN / 4);
    constexpr int strideB = NUM_THREADS / (BN / 4);
    constexpr int loadsA = BM / strideA, loadsB = BK / strideB;   // float4 loads a thread, a tile

    // this thread's first row/col inside the block tile
    const int tRow = warpRow * WM + threadRowInWarp * TM;   // + wSubRow * WSUBM + i
    const int tCol = warpCol * WN + threadColInWarp * TN;   // + wSubCol * WSUBN + j

    // global -> registers: tile k0's float4s of A (and, load_tile, of B): zeros outside the
    // matrices; a block whose tiles all lie inside, FULL, loads without a guard
    float4 ra[loadsA];
#if !ASYNC_B
    float4 rb[loadsB];
#endif
    auto load_a = [&](int k0, auto full) {
#pragma unroll
        for (int l = 0; l < loadsA; ++l) {
            const int gr = rowBase + innerRowA + l * strideA, gc = k0 + innerColA * 4;
            if (decltype(full)::value) {
                ra[l] = ld4(&A[gr * K + gc]);
            } else {
                ra[l] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (gr < M && gc < K) ra[l] = ld4(&A[gr * K + gc]);
            }
        }
    };
#if !ASYNC_B  // B through registers too (16_async_b copies it straight to shared memory)
    auto load_tile = [&](int k0, auto full) {
        load_a(k0, full);
#pragma unroll
        for (int l = 0; l < loadsB; ++l) {
            const int gr = k0 + innerRowB + l * strideB, gc = colBase + innerColB * 4;
            if (decltype(full)::value) {
                rb[l] = ld4(&B[gr * N + gc]);
            } else {
                rb[l] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (gr < K && gc < N) rb[l] = ld4(&B[gr * N + gc]);
            }
        }
    };
#endif
    // registers -> shared stage st: A transposed (4 scalar stores), B as it is (one float4)
    auto store_a = [&](int st) {
        float* as = As + st * BK * BM;
#pragma unroll
        for (int l = 0; l < loadsA; ++l) {
            const int r = innerRowA + l * strideA;
            as[AS_IDX(innerColA * 4 + 0, r)] = ra[l].x;
            as[AS_IDX(innerColA * 4 + 1, r)] = ra[l].y;
            as[AS_IDX(innerColA * 4 + 2, r)] = ra[l].z;
            as[AS_IDX(innerColA * 4 + 3, r)] = ra[l].w;
        }
    };
#if !ASYNC_B
    auto store_tile = [&](int st) {
        store_a(st);
        float* bs = Bs + st * BK * BN;
#pragma unroll
        for (int l = 0; l < loadsB; ++l)
            *reinterpret_cast<float4*>(&bs[(innerRowB + l * strideB) * BN + innerColB * 4]) = rb[l];
    };
#endif

    float acc[WMITER * TM][WNITER * TN];
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = 0.0f;
    float regM[WMITER * TM], regN[WNITER * TN];

    auto compute_steps = [&](int st, auto d0, auto d1) {   // k-steps [d0, d1) of stage st
        const float* as = As + st * BK * BM;
        const float* bs = Bs + st * BK * BN;
#pragma unroll
        for (int dot = decltype(d0)::value; dot < decltype(d1)::value; ++dot) {
#pragma unroll
            for (int ws = 0; ws < WMITER; ++ws)
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 a = *reinterpret_cast<const float4*>(&as[AS_IDX(dot, tRow + ws * WSUBM + i)]);
                    regM[ws * TM + i + 0] = a.x; regM[ws * TM + i + 1] = a.y;
                    regM[ws * TM + i + 2] = a.z; regM[ws * TM + i + 3] = a.w;
                }
#pragma unroll
            for (int ws = 0; ws < WNITER; ++ws)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 b = *reinterpret_cast<const float4*>(&bs[dot * BN + tCol + ws * WSUBN + j]);
                    regN[ws * TN + j + 0] = b.x; regN[ws * TN + j + 1] = b.y;
                    regN[ws * TN + j + 2] = b.z; regN[ws * TN + j + 3] = b.w;
                }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int jj = 0; jj < WNITER * TN; ++jj) {
                    // serpentine: odd rows walk the columns backwards, so consecutive FFMAs share
                    // an operand across the row change (operand reuse)
                    const int j = (ZIGZAG && (i & 1)) ? WNITER * TN - 1 - jj : jj;
                    acc[i][j] += regM[i] * regN[j];
                }
        }
    };
    auto compute = [&](int st) { compute_steps(st, Int<0>{}, Int<BK>{}); };

    const int numTiles = (K + BK - 1) / BK;
#if ASYNC_B
    // 16_async_b: tile k0's B straight into shared stage st by cp.async (16 bytes a copy, zeros
    // outside B: N % 4 == 0, so a float4 is all in or all out), no registers on the way
    auto copy_b = [&](int k0, int st, auto full) {
        float* bs = Bs + st * BK * BN;
#pragma unroll
        for (int l = 0; l < loadsB; ++l) {
            const int r = innerRowB + l * strideB, gr = k0 + r, gc = colBase + innerColB * 4;
            const bool ok = decltype(full)::value || (gr < K && gc < N);
            copy16(&bs[r * BN + innerColB * 4], ok ? &B[gr * N + gc] : B, ok);
        }
        commit_copies();
    };
    // tile t lives in stage t & 1. Iteration t: issue tile t+1 (B's copies, A's loads), compute
    // tile t while they fly, store A's registers, wait for this thread's copies, one barrier.
    // Stage (t+1) & 1 was last read by compute(t-1), which every warp finished before the
    // barrier that ended iteration t-1: writing it in iteration t is safe.
    auto main_loop = [&](auto full) {
        copy_b(0, 0, full);
        load_a(0, full);
        store_a(0);
        wait_copies<0>();
        __syncthreads();
        for (int t = 0; t < numTiles; ++t) {
            const bool more = t + 1 < numTiles;
            if (more) {
                copy_b((t + 1) * BK, (t + 1) & 1, full);
                load_a((t + 1) * BK, full);
            }
            compute(t & 1);
            if (more) {
                store_a((t + 1) & 1);
                wait_copies<0>();
                __syncthreads();   // tile t+1 whole and visible; tile t read by every warp
            }
        }
    };
#else
    auto main_loop = [&](auto full) {
        load_tile(0, full);
        store_tile(0);
        __syncthreads();
        for (int t = 0; t < numTiles; ++t) {
            const bool more = t + 1 < numTiles;
            if (PREFETCH) {
                // tile t+1's loads are in flight while tile t computes; they land in the other
                // stage, which every warp finished reading before the barrier that ended t-1
                if (more) load_tile((t + 1) * BK, full);
                compute(t & 1);
                if (more) store_tile((t + 1) & 1);
            } else if (LOAD_AT < BK) {
                // tile t+1's loads issue after k-step LOAD_AT of tile t: their latency overlaps
                // the rest of the tile's FFMAs and the barrier, their registers live that long
                // (the last tile loads itself again, unused: no branch for the compiler to sink
                // the loads into)
                compute_steps(0, Int<0>{}, Int<LOAD_AT>{});
                load_tile(min(t + 1, numTiles - 1) * BK, full);
                compute_steps(0, Int<LOAD_AT>{}, Int<BK>{});
                if (more) {
                    __syncthreads();   // everyone done reading the one stage
                    store_tile(0);
                }
            } else {
                compute(0);
                if (more) {
                    __syncthreads();   // everyone done reading the one stage
                    load_tile((t + 1) * BK, full);
                    store_tile(0);
                }
            }
            if (more) __syncthreads();   // tile t+1 visible to every warp
        }
    };
#endif
    if (rowBase + BM <= M && colBase + BN <= N && K % BK == 0)
        main_loop(Bool<true>{});
    else
        main_loop(Bool<false>{});

    // epilogue: float4 read-modify-write (col % 4 == 0, N % 4 == 0: a float4 is all-in or all-out)
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = rowBase + tRow + wm * WSUBM + i;
            if (row >= M) continue;
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const int col = colBase + tCol + wn * WSUBN + j;
                    if (col >= N) continue;
                    const float* a = &acc[wm * TM + i][wn * TN + j];
                    float4* cp = reinterpret_cast<float4*>(&C[row * N + col]);
                    float4 r = make_float4(alpha * a[0], alpha * a[1], alpha * a[2], alpha * a[3]);
                    if (beta != 0.0f) {
                        const float4 c = *cp;
                        r.x += beta * c.x; r.y += beta * c.y; r.z += beta * c.z; r.w += beta * c.w;
                    }
                    *cp = r;
                }
        }
}

// 15_stream_k: 10's tuned tile, its last wave spread over every SM (a stream-K tail).
//
// Changed from 10: the grid is no longer one block a tile. 10's winner at 4096^3 (64x128 tiles,
// 128 threads, 128 registers: 4 blocks an SM) makes 2048 tiles for 132 x 4 = 528 resident
// blocks: 3.88 waves (ncu's launch__waves_per_multiprocessor), so the fourth wave runs 464
// tiles on 528 slots and the kernel waits on it with 12 % of the GPU idle, about 3 % of the
// kernel's time. At 8192^3 (15.5 waves) the same tail costs under 1 %, and 10 reads 95 % of
// cuBLAS there against 91.6 % at 4096^3.
//
// The grid is P x R blocks, P = min(MAX_SK, SM_COUNT * MIN_BLOCKS) (one block per resident
// slot), and the tiles in the raster order of 10 (GROUP_M block rows at a time):
//   - rows 0 .. R-2: data-parallel, one tile a block, as in 10 (tile = row * P + column);
//   - row R-1: stream-K. The T_sk tiles left (the remainder T % P when T >= P, with the last
//     full wave too where the remainder is under P / 4, so that no block holds a sliver of a
//     tile; every tile when T < P) are a line of T_sk x KT k-steps (KT = cdiv(K, BK)),
//     cut into P equal ranges, one a block. A tile whose whole K a block holds ends as in 10;
//     a block that starts a tile but does not finish it leaves its accumulators in the
//     workspace (its own slot) and raises its flag; the block that holds a tile's last k-step
//     adds the partial sums of the blocks before it (flags waited on, in order) and writes C.
//     Each block leaves at most one partial (the tile at the end of its range), and runs its
//     range from the end back, that tile first: the partial a block waits for was left at
//     the start of the block before it, not at its end. Blocks wait only on blocks of lower
//     index, which the GPU dispatches first: no deadlock, and the sums are added in the same
//     order every run.
// With T < P (small problems) every tile is split over several blocks (split-K in effect):
// P = min(MAX_SK, SM_COUNT * MIN_BLOCKS, T * max(1, KT / MIN_ITERS)) keeps MIN_ITERS k-steps
// a block.
//
// Measured on the H200 (kernelbook bench, 4096^3): the first version ran each range from its
// start, so every block waited at its first tile for the previous block's last partial, a
// chain through all 528 stream-K blocks: 20.2 ms against 10's 2.95 (13.4 % of cuBLAS against
// 92.0 %). Run from the end, as now (the book run at b12f559): 3.023 ms, 89.3 % of cuBLAS
// against 10's 2.948 ms, 91.6 %; 92.3 % against 95.1 % at 8192^3; but 99.1 % against 94.4 % at
// 3000^3, where 10's last wave is emptier. ncu at 4096^3: no wait chain (barrier stalls 0.32
// warps an issue against 0.28), the same FFMAs, and 1.59 GB read from DRAM against 10's 0.52:
// the stream-K blocks run at different k offsets of ~2 tiles each, so what is in flight is
// every k of their A rows and B columns (about 96 MB), not one k window, and L2 (50 MB)
// thrashes. That version's stream-K row always took a full wave with the remainder (992 of
// 2048 tiles at 4096^3, 800 of 8192 at 8192^3): its k-steps ran about 12 % slower than the
// data-parallel rows'. Now it takes the remainder alone where that is a quarter wave or more
// (464 tiles at 4096^3, 272 at 8192^3; 3000^3's 72 still take a wave with them): half the
// tiles at scattered k, so less of L2 thrashed, and fewer k-steps run at the slower rate
// (the book run at 18d7765: 90.8 % at 4096^3, 92.8 % at 8192^3, 99.3 % at 3000^3). Beyond:
// stream-K units aligned in k (the tail's tiles split in equal k pieces taken round-robin, so
// the blocks of a round share one k window).
// The main loop is 10's, with 10's FULL copy for tiles inside the matrices (no load guards:
// 1142 instructions a tile against 1177, 128 registers), so 15 against 10 stays stream-K alone.
//
// Why it should help: at 4096^3 the last 0.88 wave (464 tiles on 528 slots) becomes 0.88 of
// a tile's k-steps on every slot at once, so no SM idles at the end; the cost is one 32 KiB
// partial written and read per split tile (L2-resident) and a flag wait.
// What ncu should show: the same FFMA share and stalls as 10 in the data-parallel rows, and
// sm__cycles_active.avg close to sm__cycles_active.max (no SM idle while others finish);
// gpu__time_duration about 3 % under 10's at 4096^3.
//
// The workspace (zeroed once when the launcher is made) holds MAX_SK partial tiles and MAX_SK
// flags. A flag goes 0 -> 1 when its partial is written and back to 0 when it is consumed, so
// every launch leaves them all 0 for the next.
//
// Sizes: as 10 (any M, N, K remainder; K % 4 == 0 and N % 4 == 0 for the float4 accesses).
// Launch: grid (P, R), block (NUM_THREADS), no dynamic smem, the workspace after C.

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
#ifndef TM
#error "TM must be defined"
#endif
#ifndef TN
#error "TN must be defined"
#endif
#ifndef NUM_THREADS
#error "NUM_THREADS must be defined"
#endif
#ifndef MAX_SK
#error "MAX_SK (stream-K blocks the workspace holds) must be defined"
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif

#define WARPSIZE 32
#define WNITER 1
#define WMITER ((WM) * (WN) / (WARPSIZE * (TM) * (TN) * (WNITER)))
#define WSUBM ((WM) / WMITER)
#define WSUBN ((WN) / (WNITER))
#define ACC_M (WMITER * TM)
#define ACC_N (WNITER * TN)

static_assert(NUM_THREADS % WARPSIZE == 0 && NUM_THREADS <= 1024, "NUM_THREADS: whole warps, <= 1024");
static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
static_assert((BM / WM) * (BN / WN) == NUM_THREADS / WARPSIZE, "one warp per warp tile");
static_assert(WMITER >= 1 && (WM * WN) % (WARPSIZE * TM * TN * WNITER) == 0, "WMITER must be a positive integer");
static_assert(WSUBN % TN == 0 && WSUBM % TM == 0, "thread tiles must tile the warp sub-tile");
static_assert((WSUBN / TN) * (WSUBM / TM) == WARPSIZE, "32 lanes must exactly cover a warp sub-tile");
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM, TN multiples of 4 (LDS.128 / STG.128)");
static_assert(BK % 4 == 0 && BN % 4 == 0, "float4 loads");
static_assert(NUM_THREADS % (BK / 4) == 0 && BM % (NUM_THREADS / (BK / 4)) == 0,
              "A tile: the float4 loads must cover BM x BK exactly");
static_assert(NUM_THREADS % (BN / 4) == 0 && BK % (NUM_THREADS / (BN / 4)) == 0,
              "B tile: the float4 loads must cover BK x BN exactly");
static_assert(BM % 32 == 0 && BK <= 32 && (128 / BK) % 4 == 0, "As swizzle assumptions (see AS_IDX)");
static_assert((ACC_M * ACC_N) % 4 == 0, "partials move as float4");
static_assert(GROUP_M >= 1, "GROUP_M >= 1");

#define AS_IDX(k, m) ((k) * BM + ((m) ^ (((k) / 4) * (128 / BK))))

// The hand-off between blocks. On the GPU: every thread fences its partial's stores before the
// barrier after which one thread raises the flag, and the flag is read (then a fence) before
// the partial, which is read through L2 (ld.cg: this SM's L1 may hold an older launch's lines
// of the slot). The CPU emulator runs blocks one after another: a flag a block waits on is up
// already, or never.
#ifdef KERNELBOOK_EMU
inline void sk_fence() {}
inline int sk_tid() { return threadIdx.x; }
inline void sk_raise(int* flag) { *flag = 1; }
inline void sk_wait(int* flag) {
    if (*flag == 0) {
        fprintf(stderr, "15_stream_k: block (%u, %u) waits on a flag no earlier block raised\n",
                blockIdx.x, blockIdx.y);
        abort();
    }
}
inline float4 sk_load(const float4* p) { return *p; }
#else
__device__ __forceinline__ void sk_fence() { __threadfence(); }
__device__ __forceinline__ int sk_tid() {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}
__device__ __forceinline__ void sk_raise(int* flag) { atomicExch(flag, 1); }
__device__ __forceinline__ void sk_wait(int* flag) {
    while (atomicAdd(flag, 0) == 0) __nanosleep(64);
    __threadfence();
}
__device__ __forceinline__ float4 sk_load(const float4* p) { return __ldcg(p); }
#endif

template <bool B> struct Bool { static constexpr bool value = B; };

extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
sgemm_stream_k(int M, int N, int K, float alpha, const float* __restrict__ A,
               const float* __restrict__ B, float beta, float* __restrict__ C,
               unsigned char* __restrict__ workspace)
{
    __shared__ __align__(16) float As[BK * BM];
    __shared__ __align__(16) float Bs[BK * BN];

    const int tid = threadIdx.x;
    const int warpIdx = tid / WARPSIZE;
    const int lane = tid % WARPSIZE;
    const int warpCol = warpIdx % (BN / WN);
    const int warpRow = warpIdx / (BN / WN);
    const int threadColInWarp = lane % (WSUBN / TN);
    const int threadRowInWarp = lane / (WSUBN / TN);
    const int tRow = warpRow * WM + threadRowInWarp * TM;
    const int tCol = warpCol * WN + threadColInWarp * TN;

    const int innerRowA = tid / (BK / 4), innerColA = tid % (BK / 4);
    constexpr int strideA = NUM_THREADS / (BK / 4);
    const int innerRowB = tid / (BN / 4), innerColB = tid % (BN / 4);
    constexpr int strideB = NUM_THREADS / (BN / 4);
    constexpr int loadsA = BM / strideA, loadsB = BK / strideB;

    const int tilesM = (M + BM - 1) / BM, tilesN = (N + BN - 1) / BN;
    const int numTiles = tilesM * tilesN;
    const int KT = (K + BK - 1) / BK;

    float acc[ACC_M][ACC_N];
    float regM[ACC_M], regN[ACC_N];
    float4 ra[loadsA], rb[loadsB];

    // tile t of the raster (GROUP_M block rows at a time, column by column) -> its corner
    auto corner = [&](int t, int& rowBase, int& colBase) {
        const int perGroup = GROUP_M * tilesN;
        const int first = (t / perGroup) * GROUP_M;
        const int rows = min(GROUP_M, tilesM - first);
        rowBase = (first + (t % perGroup) % rows) * BM;
        colBase = ((t % perGroup) / rows) * BN;
    };

    // acc = the tile's A[rows, k] @ B[k, cols] over k-steps [kBegin, kEnd)
    // (FULL: the tile lies inside the matrices, its loads need no guard; as 10)
    auto mainloop = [&](int rowBase, int colBase, int kBegin, int kEnd, auto full) {
#pragma unroll
        for (int i = 0; i < ACC_M; ++i)
#pragma unroll
            for (int j = 0; j < ACC_N; ++j) acc[i][j] = 0.0f;
        auto load_tile = [&](int k0) {
#pragma unroll
            for (int l = 0; l < loadsA; ++l) {
                const int gr = rowBase + innerRowA + l * strideA, gc = k0 + innerColA * 4;
                if (decltype(full)::value) {
                    ra[l] = *reinterpret_cast<const float4*>(&A[gr * K + gc]);
                } else {
                    ra[l] = make_float4(0.f, 0.f, 0.f, 0.f);
                    if (gr < M && gc < K) ra[l] = *reinterpret_cast<const float4*>(&A[gr * K + gc]);
                }
            }
#pragma unroll
            for (int l = 0; l < loadsB; ++l) {
                const int gr = k0 + innerRowB + l * strideB, gc = colBase + innerColB * 4;
                if (decltype(full)::value) {
                    rb[l] = *reinterpret_cast<const float4*>(&B[gr * N + gc]);
                } else {
                    rb[l] = make_float4(0.f, 0.f, 0.f, 0.f);
                    if (gr < K && gc < N) rb[l] = *reinterpret_cast<const float4*>(&B[gr * N + gc]);
                }
            }
        };
        auto store_tile = [&]() {
#pragma unroll
            for (int l = 0; l < loadsA; ++l) {
                const int r = innerRowA + l * strideA;
                As[AS_IDX(innerColA * 4 + 0, r)] = ra[l].x;
                As[AS_IDX(innerColA * 4 + 1, r)] = ra[l].y;
                As[AS_IDX(innerColA * 4 + 2, r)] = ra[l].z;
                As[AS_IDX(innerColA * 4 + 3, r)] = ra[l].w;
            }
#pragma unroll
            for (int l = 0; l < loadsB; ++l)
                *reinterpret_cast<float4*>(&Bs[(innerRowB + l * strideB) * BN + innerColB * 4]) = rb[l];
        };
        load_tile(kBegin * BK);
        __syncthreads();  // the previous tile's last compute is done with the stage
        store_tile();
        __syncthreads();
        for (int t = kBegin; t < kEnd; ++t) {
#pragma unroll
            for (int dot = 0; dot < BK; ++dot) {
#pragma unroll
                for (int ws = 0; ws < WMITER; ++ws)
#pragma unroll
                    for (int i = 0; i < TM; i += 4) {
                        const float4 a = *reinterpret_cast<const float4*>(&As[AS_IDX(dot, tRow + ws * WSUBM + i)]);
                        regM[ws * TM + i + 0] = a.x; regM[ws * TM + i + 1] = a.y;
                        regM[ws * TM + i + 2] = a.z; regM[ws * TM + i + 3] = a.w;
                    }
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 b = *reinterpret_cast<const float4*>(&Bs[dot * BN + tCol + j]);
                    regN[j + 0] = b.x; regN[j + 1] = b.y; regN[j + 2] = b.z; regN[j + 3] = b.w;
                }
#pragma unroll
                for (int i = 0; i < ACC_M; ++i)
#pragma unroll
                    for (int jj = 0; jj < ACC_N; ++jj) {
                        const int j = (i & 1) ? ACC_N - 1 - jj : jj;  // 10's serpentine (ZIGZAG)
                        acc[i][j] += regM[i] * regN[j];
                    }
            }
            if (t + 1 < kEnd) {
                __syncthreads();
                load_tile((t + 1) * BK);
                store_tile();
                __syncthreads();
            }
        }
    };

    // C = alpha * acc + beta * C on the tile (float4 read-modify-write, as in 10). The thread's
    // offsets are derived here from a fresh read of its index (sk_tid), which the compiler may
    // not hoist out of the segment loop: hoisted, they would stay live through every main loop
    // (14 more registers, past the 128 of 4 blocks an SM).
    auto epilogue = [&](int rowBase, int colBase) {
        const int me = sk_tid(), meLane = me % WARPSIZE, meWarp = me / WARPSIZE;
        const int tRow = (meWarp / (BN / WN)) * WM + (meLane / (WSUBN / TN)) * TM;
        const int tCol = (meWarp % (BN / WN)) * WN + (meLane % (WSUBN / TN)) * TN;
#pragma unroll
        for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const int row = rowBase + tRow + wm * WSUBM + i;
                if (row >= M) continue;
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const int col = colBase + tCol + j;
                    if (col >= N) continue;
                    const float* a = &acc[wm * TM + i][j];
                    float4* cp = reinterpret_cast<float4*>(&C[row * N + col]);
                    float4 r = make_float4(alpha * a[0], alpha * a[1], alpha * a[2], alpha * a[3]);
                    if (beta != 0.0f) {
                        const float4 c = *cp;
                        r.x += beta * c.x; r.y += beta * c.y; r.z += beta * c.z; r.w += beta * c.w;
                    }
                    *cp = r;
                }
            }
    };

    // This block's k-steps on the line of every tile's KT steps, [it, end): a data-parallel
    // block's one whole tile, or a stream-K block's share of the tiles after the DP rows'.
    // Iteration counts fit an int (T x KT: 4.2 M at 8192^3); the products of the share, 64 bits.
    // Everything a segment needs after its main loop is recomputed from the launch's
    // parameters there, not kept live across the loop (128 registers, as 10).
    auto dp_tiles = [&]() { return min(numTiles, (int)(gridDim.y - 1) * (int)gridDim.x); };
    auto range_begin = [&](int b) {
        const int dp = dp_tiles();
        const long long work = (long long)(numTiles - dp) * KT;
        return dp * KT + (int)((long long)b * work / gridDim.x);
    };
    // [first, end): a data-parallel block's one whole tile, or a stream-K block's share. A share
    // runs from its end back to its start: the tile it starts and leaves to the next block
    // first, so that its partial is there early, then whole tiles, then the tile it finishes,
    // by which time the block before it has long left that tile's partial. (Run from the start,
    // each block would wait at its first tile for the previous block's last: a chain through
    // every stream-K block, measured 7x slower than 10 at 4096^3.)
    const bool dp = blockIdx.y + 1 < gridDim.y;
    const int dpTile = blockIdx.y * gridDim.x + blockIdx.x;
    if (dp && dpTile >= dp_tiles()) return;
    auto range_first = [&]() { return dp ? dpTile * KT : range_begin(blockIdx.x); };
    int end = dp ? (dpTile + 1) * KT : range_begin(blockIdx.x + 1);
    // this thread's accumulators in a partial: float4 q of the thread's, NUM_THREADS apart
    constexpr int ACC4 = ACC_M * ACC_N / 4;
    constexpr size_t SLOT = (size_t)BM * BN;  // floats a partial
    int rowBase, colBase;
    while (end > range_first()) {
        const int tile = (end - 1) / KT;
        const int kBegin = max(range_first() - tile * KT, 0);
        const int kEnd = end - tile * KT;
        corner(tile, rowBase, colBase);
        if (rowBase + BM <= M && colBase + BN <= N && K % BK == 0)
            mainloop(rowBase, colBase, kBegin, kEnd, Bool<true>{});
        else
            mainloop(rowBase, colBase, kBegin, kEnd, Bool<false>{});
        corner(tile, rowBase, colBase);  // again: not kept live through the loop
        if (kEnd < KT) {  // a tile started here, finished by a later block: leave the partial
            float4* mine = reinterpret_cast<float4*>(workspace) + blockIdx.x * SLOT / 4;
#pragma unroll
            for (int q = 0; q < ACC4; ++q)
                mine[q * NUM_THREADS + tid] = *reinterpret_cast<const float4*>(&acc[0][0] + 4 * q);
            sk_fence();  // each thread's stores visible device-wide before the flag goes up
            __syncthreads();
            if (tid == 0) sk_raise(reinterpret_cast<int*>(workspace) + MAX_SK * SLOT + blockIdx.x);
        } else {
            if (kBegin > 0) {  // add the partials of the blocks before, back to the tile's start
                const int tileStart = tile * KT;
                int* flags = reinterpret_cast<int*>(workspace) + MAX_SK * SLOT;
                for (int b = blockIdx.x - 1; b >= 0; --b) {
                    const int bBegin = range_begin(b);
                    if (bBegin < range_begin(b + 1)) {  // an empty range left no partial
                        if (tid == 0) sk_wait(&flags[b]);
                        __syncthreads();
                        const float4* theirs = reinterpret_cast<const float4*>(workspace) + b * SLOT / 4;
#pragma unroll
                        for (int q = 0; q < ACC4; ++q) {
                            const float4 v = sk_load(&theirs[q * NUM_THREADS + tid]);
                            float* a = &acc[0][0] + 4 * q;
                            a[0] += v.x; a[1] += v.y; a[2] += v.z; a[3] += v.w;
                        }
                        __syncthreads();
                        if (tid == 0) flags[b] = 0;  // consumed: 0 again for the next launch
                    }
                    if (bBegin <= tileStart) break;
                }
            }
            epilogue(rowBase, colBase);
        }
        end = tile * KT + kBegin;
    }
}

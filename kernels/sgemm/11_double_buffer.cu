// 11_double_buffer: 10 + two shared-memory stages filled by asynchronous copies (cp.async).
//
// Changed from 10: As and Bs get two stages. Global->shared copies no longer pass through registers:
// B rows go by 16-byte `cp.async.cg.shared.global` (L2 only), the transposed A tile by 4-byte
// `cp.async.ca` (one per element: a 16-byte copy cannot transpose), both with src-size 0 to
// zero-fill out-of-range elements. While the warps compute on stage t%2, the copies of tile t+1
// into the other stage are in flight, so the global-load latency overlaps the FFMAs instead of
// stalling at the barrier.
// Pipeline, one barrier per tile:
//   issue(tile 0 -> stage 0); commit
//   for t: wait_group 0          (this thread's copies of tile t have landed; t+1 not issued yet)
//          __syncthreads()       (everyone's copies of tile t visible; and everyone finished
//                                 computing tile t-1, so stage (t+1)%2 may be overwritten)
//          issue(tile t+1 -> stage (t+1)%2); commit   (empty group past the end)
//          compute(stage t%2)
// A copy mapping as in 10 (thread: one row m, one k-quad, 4 copies of 4 bytes, one source pointer);
// stored at As[k][m] with rows padded to BM + 4 (bank shift 4 per k: a warp's stores, 8 rows x
// 4 k-quads at BK=16, are 2-way conflicted; the LDS.128 reads stay aligned and use immediate offsets).
// Why it should help: 10 stalls every tile on LDG latency before the barrier (stall "long
// scoreboard"/"barrier"); here that latency is hidden, and no registers hold staged tiles.
// What the profiler should show: smsp__pcsamp stall_long_scoreboard and stall_barrier shares drop,
// LDGSTS instead of LDG+STS in the SASS, FFMA issue share up. Registers stay ~10's (ptxas: 220 vs
// 228; the 128 accumulators dominate), so still 2 blocks = 8 warps per SM.
// Measured on the H200 (worklog, 4096^3): 40.4 TFLOP/s, 84.5 % of cuBLAS, 0.91x 10. The copies
// are hidden (long_scoreboard 0.22 stalls an issue against 10's 0.38, barrier 0.04 against 0.31),
// but siboehm's shape keeps 220 registers, 8 warps an SM (ncu: 8.0 active against 10's 15.0),
// and issue active falls to 0.71 a cycle (10: 0.78): on Hopper this step buys latency hiding
// with warps it does not have. 10's winner is a 64x128 tile in 127 registers, 16 warps.
//
// Sizes: any M and N remainder and any K remainder (zero-filled copies), with K % 4 == 0 and
// N % 4 == 0 (16-byte B copies and float4 C accesses need aligned row starts).
// Launch: grid (cdiv(N, BN), cdiv(M, BM)), block (NUM_THREADS), no dynamic smem (2 stages static).
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
              "A tile: the k-quads must cover BM x BK exactly");
static_assert(NUM_THREADS % (BN / 4) == 0 && BK % (NUM_THREADS / (BN / 4)) == 0,
              "B tile: the float4 loads must cover BK x BN exactly");
static_assert(2 * (BK * (BM + 4) + BK * BN) * 4 <= 48 * 1024, "static shared memory (2 stages) over 48 KiB");

// As: transposed A tile, As[k][m], each k-row padded to BM + 4 words (16-byte multiple, so float4
// reads stay aligned). Row k starts 4*k banks later, so a warp's 4-byte copies (8 rows m x 4
// k-quads) are 2-way conflicted. Unlike an XOR swizzle, the read addresses are base + immediate.
#define AS_LD (BM + 4)
#define AS_IDX(k, m) ((k) * AS_LD + (m))

__device__ __forceinline__ unsigned smem_u32(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 4-byte async copy global -> shared (L1-allocating); src_bytes = 0 writes a zero.
__device__ __forceinline__ void cp_async_4(float* dst, const float* src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid ? 4 : 0) : "memory");
}
// 16-byte async copy global -> shared (L2 only); src_bytes = 0 writes 16 zero bytes.
__device__ __forceinline__ void cp_async_16(float* dst, const float* src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
sgemm_double_buffer(int M, int N, int K, float alpha, const float* __restrict__ A,
                    const float* __restrict__ B, float beta, float* __restrict__ C)
{
    __shared__ __align__(16) float As[2][BK * AS_LD];
    __shared__ __align__(16) float Bs[2][BK * BN];

    const int tid = threadIdx.x;
    const int warpIdx = tid / WARPSIZE;
    const int lane = tid % WARPSIZE;
    const int warpCol = warpIdx % (BN / WN);
    const int warpRow = warpIdx / (BN / WN);
    const int threadColInWarp = lane % (WSUBN / TN);
    const int threadRowInWarp = lane / (WSUBN / TN);

    const int rowBase = blockIdx.y * BM;
    const int colBase = blockIdx.x * BN;

    const int innerRowA = tid / (BK / 4), innerColA = tid % (BK / 4);   // A: row m, k-quad (as in 10)
    constexpr int strideA = NUM_THREADS / (BK / 4);
    const int innerRowB = tid / (BN / 4), innerColB = tid % (BN / 4);
    constexpr int strideB = NUM_THREADS / (BN / 4);

    // this thread's first row/col inside the block tile
    const int tRow = warpRow * WM + threadRowInWarp * TM;   // + wSubRow * WSUBM + i
    const int tCol = warpCol * WN + threadColInWarp * TN;   // + wSubCol * WSUBN + j

    float acc[WMITER * TM][WNITER * TN];
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = 0.0f;
    float regM[WMITER * TM], regN[WNITER * TN];

    // Issue the async copies of the K-tile starting at k0 into stage st (zero fill out of range).
    auto issue_tile = [&](int k0, int st) {
#pragma unroll
        for (int off = 0; off < BM; off += strideA) {
            const int r = innerRowA + off, c = innerColA * 4;
            const int gr = rowBase + r, gc = k0 + c;
            const bool ok = gr < M && gc < K;          // K % 4 == 0: the 4 elements are all in or all out
            const float* src = ok ? &A[gr * K + gc] : A;
#pragma unroll
            for (int j = 0; j < 4; ++j) cp_async_4(&As[st][AS_IDX(c + j, r)], src + (ok ? j : 0), ok);
        }
#pragma unroll
        for (int off = 0; off < BK; off += strideB) {
            const int r = innerRowB + off;
            const int gr = k0 + r, gc = colBase + innerColB * 4;
            const bool ok = gr < K && gc < N;
            cp_async_16(&Bs[st][r * BN + innerColB * 4], ok ? &B[gr * N + gc] : B, ok);
        }
    };

    const int numTiles = (K + BK - 1) / BK;
    issue_tile(0, 0);
    cp_async_commit();

    for (int t = 0; t < numTiles; ++t) {
        const int st = t & 1;
        cp_async_wait_all();   // my copies of tile t are done (tile t+1 is not issued yet)
        __syncthreads();       // all copies of tile t visible; all threads are done with tile t-1
        if (t + 1 < numTiles) issue_tile((t + 1) * BK, st ^ 1);   // overwrites tile t-1's stage
        cp_async_commit();

        const float* as = As[st];
        const float* bs = Bs[st];
#pragma unroll
        for (int dot = 0; dot < BK; ++dot) {
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
                for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        // no second barrier: the copies that overwrite this stage (tile t+2) are issued in
        // iteration t+1 after its barrier, which every thread reaches only after these reads
    }

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

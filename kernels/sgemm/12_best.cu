// 12_best: multi-stage cp.async pipeline + register double-buffered fragments + strided
// (CUTLASS-style) thread tiles, sized for H200 SIMT FP32 (FFMA only: no tensor cores, no TF32).
//
// Changed from 11:
//  1. Thread tile layout. A warp covers WM x WN as LM x LN lanes (LM = WM/TM, LN = WN/TN,
//     LM*LN = 32); a lane's TM rows are TM/4 groups of 4 rows spaced LM*4 apart, its TN cols
//     TN/4 groups of 4 spaced LN*4 apart. Every fragment LDS.128 of a warp then reads LM (or LN)
//     consecutive float4 = at most 128 contiguous bytes: one wavefront, no bank conflict
//     (10/11 read 8 float4 32 B apart: 2 wavefronts). C stores: 8 lanes write 128 contiguous bytes.
//  2. STAGES-deep cp.async ring (dynamic shared memory): STAGES-1 tiles are in flight while one
//     is computed. One __syncthreads per K-tile.
//  3. Register double buffering: the fragments for step k+1 (and for step 0 of the next tile,
//     right after the barrier) are loaded while the FFMAs of step k run, so LDS latency is
//     hidden inside each warp and not only by other warps.
//  4. Smaller per-thread register footprint (8x8 = 64 accumulators, ~128 registers) so that
//     MIN_BLOCKS=2 blocks of 256 threads fit per SM (16 warps), with __launch_bounds__.
//     Block tile, warp tile, BK, STAGES and MIN_BLOCKS are tuned in config (24 candidates,
//     127-130 registers, no spills).
//  5. As (transposed A) rows padded to BM + 4: the 4-byte A copies of a warp (16 rows x 2 k-quads
//     at BK=8) land on 32 distinct banks; all fragment addresses are base + immediate offsets.
// Mainloop (S = STAGES, tile t lives in stage t % S):
//   prologue: issue tiles 0..S-2 (one commit group each); wait_group S-2; __syncthreads; frag(0,0)
//   iteration t: issue tile t+S-1 into stage (t-1)%S (free: every thread passed the barrier that
//                ended iteration t-1, after its last read of that stage); commit (maybe empty)
//                for k < BK-1: load frag(k+1) from stage t%S; FFMA frag(k)
//                k = BK-1:     wait_group S-2 (my copies of tile t+1 landed); __syncthreads
//                              (everyone's copies visible; everyone done reading stage t%S);
//                              load frag(0) of tile t+1; FFMA frag(BK-1)
//   wait_group S-2 is exact: before it, S+t groups were committed (tiles 0..t+S-1), so at most
//   the S-2 newest (tiles t+2..t+S-1) may still be pending.
// Why it should help: FFMA share of issued instructions ~94% (64 FFMA per 4 LDS.128 per k),
// no exposed LDG or LDS latency, 16 warps/SM to cover barrier skew.
// What the profiler should show: sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
// close to cuBLAS's kernel; l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum ~0; stall
// reasons dominated by "selected"/"math_pipe_throttle"; no long_scoreboard stalls in the mainloop.
// Measured on the H200 (worklog, 4096^3): 43.7 TFLOP/s, 88.3 % of cuBLAS (101.6 % at
// 4096x4096x1000), 0.98x 10's best. Same occupancy (16 warps) and issue rate (0.78 a cycle) as
// 10's winner, long_scoreboard down to 0.19, but 1.8 % more instructions (the 4-byte A copies:
// 8 LDGSTS a thread a tile) and the stalls move to the LSU: short_scoreboard 0.78, mio_throttle
// 0.28, LSU wavefronts 72 % of peak. FMA pipe 66 % of peak (10: 68 %; cuBLAS's 49 TFLOP/s is
// ~73 %): the rest is issue slots, which this CUDA C does not get back.
//
// Sizes: any M and N remainder and any K remainder (zero-filled copies), with K % 4 == 0 and
// N % 4 == 0 (16-byte B copies and float4 C accesses need aligned row starts): covers all study
// sizes incl. 4096x4096x1000 and 3000^3.
// Launch: grid (cdiv(N, BN), cdiv(M, BM)), block (NUM_THREADS = (BM/WM)*(BN/WN)*32),
// dynamic shared memory STAGES * (BK * (BM + 4) + BK * BN) * 4 bytes.
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
#ifndef TM
#error "TM must be defined"
#endif
#ifndef TN
#error "TN must be defined"
#endif
#ifndef STAGES
#error "STAGES must be defined"
#endif
#ifndef NUM_THREADS
#error "NUM_THREADS must be defined (= (BM / WM) * (BN / WN) * 32)"
#endif
#ifndef MIN_BLOCKS
#error "MIN_BLOCKS must be defined (minimum resident blocks per SM, for __launch_bounds__)"
#endif

#define LM ((WM) / (TM))          // lanes along M in a warp
#define LN ((WN) / (TN))          // lanes along N in a warp
#define AS_LD ((BM) + 4)          // padded row of the transposed A tile
#define AS_STAGE ((BK) * AS_LD)   // floats per A stage
#define BS_STAGE ((BK) * (BN))    // floats per B stage

static_assert(NUM_THREADS == (BM / WM) * (BN / WN) * 32, "NUM_THREADS must be (BM/WM)*(BN/WN)*32");
static_assert(NUM_THREADS <= 1024, "at most 1024 threads");
static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
static_assert(WM % TM == 0 && WN % TN == 0 && LM * LN == 32, "a warp's 32 lanes must exactly cover WM x WN");
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM, TN multiples of 4 (float4 fragments)");
static_assert(BK % 4 == 0 && BK % 2 == 0, "BK multiple of 4 (k-quads; even for the fragment ping-pong)");
static_assert(BN % 4 == 0, "BN multiple of 4");
static_assert(NUM_THREADS % (BK / 4) == 0 && BM % (NUM_THREADS / (BK / 4)) == 0,
              "A tile: each thread copies k-quads of whole rows; they must cover BM x BK exactly");
static_assert(NUM_THREADS % (BN / 4) == 0 && BK % (NUM_THREADS / (BN / 4)) == 0,
              "B tile: the 16-byte copies must cover BK x BN exactly");
static_assert(STAGES >= 2, "at least 2 stages");
static_assert(STAGES * (AS_STAGE + BS_STAGE) * 4 <= 227 * 1024, "shared memory over 227 KiB");

__device__ __forceinline__ unsigned smem_u32(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 4-byte async copy global -> shared (L1-allocating: the 4 copies of a k-quad share sectors);
// src_bytes = 0 writes a zero and reads nothing.
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
template <int N_PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N_PENDING) : "memory"); }

extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
sgemm_best(int M, int N, int K, float alpha, const float* __restrict__ A,
           const float* __restrict__ B, float beta, float* __restrict__ C)
{
    extern __shared__ __align__(16) float smem[];
    float* const As = smem;                        // STAGES x [BK][AS_LD]  (transposed A)
    float* const Bs = smem + STAGES * AS_STAGE;    // STAGES x [BK][BN]

    const int tid = threadIdx.x;
    const int warpIdx = tid / 32, lane = tid % 32;
    const int warpRow = warpIdx / (BN / WN), warpCol = warpIdx % (BN / WN);
    const int laneM = lane / LN, laneN = lane % LN;
    const int rowBase = blockIdx.y * BM;
    const int colBase = blockIdx.x * BN;

    // fragment read offsets inside a stage (row k added as an immediate)
    const int aOff = warpRow * WM + laneM * 4;     // + g * LM * 4
    const int bOff = warpCol * WN + laneN * 4;     // + h * LN * 4

    // copy mapping: A: a thread copies k-quad innerColA of rows innerRowA + i*strideA (4 x 4 bytes each)
    //               B: a thread copies float4 innerColB of rows innerRowB + i*strideB
    const int innerRowA = tid / (BK / 4), innerColA = tid % (BK / 4);
    constexpr int strideA = NUM_THREADS / (BK / 4);
    const int innerRowB = tid / (BN / 4), innerColB = tid % (BN / 4);
    constexpr int strideB = NUM_THREADS / (BN / 4);

    auto issue_tile = [&](int tile, int st) {
        const int k0 = tile * BK;
        float* as = As + st * AS_STAGE;
        float* bs = Bs + st * BS_STAGE;
#pragma unroll
        for (int off = 0; off < BM; off += strideA) {
            const int r = innerRowA + off, c = innerColA * 4;
            const int gr = rowBase + r, gc = k0 + c;
            const bool ok = gr < M && gc < K;     // K % 4 == 0: the k-quad is all in or all out
            const float* src = ok ? &A[gr * K + gc] : A;
#pragma unroll
            for (int j = 0; j < 4; ++j) cp_async_4(&as[(c + j) * AS_LD + r], src + (ok ? j : 0), ok);
        }
#pragma unroll
        for (int off = 0; off < BK; off += strideB) {
            const int r = innerRowB + off, c = innerColB * 4;
            const int gr = k0 + r, gc = colBase + c;
            const bool ok = gr < K && gc < N;     // N % 4 == 0: the float4 is all in or all out
            cp_async_16(&bs[r * BN + c], ok ? &B[gr * N + gc] : B, ok);
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    float fa[2][TM], fb[2][TN];

    auto load_frag = [&](int buf, const float* as, const float* bs, int k) {
#pragma unroll
        for (int g = 0; g < TM / 4; ++g) {
            const float4 v = *reinterpret_cast<const float4*>(&as[k * AS_LD + aOff + g * LM * 4]);
            fa[buf][g * 4 + 0] = v.x; fa[buf][g * 4 + 1] = v.y; fa[buf][g * 4 + 2] = v.z; fa[buf][g * 4 + 3] = v.w;
        }
#pragma unroll
        for (int h = 0; h < TN / 4; ++h) {
            const float4 v = *reinterpret_cast<const float4*>(&bs[k * BN + bOff + h * LN * 4]);
            fb[buf][h * 4 + 0] = v.x; fb[buf][h * 4 + 1] = v.y; fb[buf][h * 4 + 2] = v.z; fb[buf][h * 4 + 3] = v.w;
        }
    };

    const int numTiles = (K + BK - 1) / BK;

    // prologue: tiles 0..STAGES-2 in flight, one commit group each (empty past the end)
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < numTiles) issue_tile(s, s);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();   // tile 0 landed (mine)
    __syncthreads();               // tile 0 landed (everyone's)
    load_frag(0, As, Bs, 0);

    int readStage = 0;                 // stage of tile t
    int writeStage = STAGES - 1;       // stage for tile t + STAGES - 1 (== (t - 1) % STAGES)
    for (int t = 0; t < numTiles; ++t) {
        if (t + STAGES - 1 < numTiles) issue_tile(t + STAGES - 1, writeStage);
        cp_async_commit();

        const float* as = As + readStage * AS_STAGE;
        const float* bs = Bs + readStage * BS_STAGE;
        const int nextStage = (readStage + 1 == STAGES) ? 0 : readStage + 1;

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            if (k < BK - 1) {
                load_frag((k + 1) & 1, as, bs, k + 1);
            } else {
                cp_async_wait<STAGES - 2>();   // my copies of tile t+1 landed
                __syncthreads();               // everyone's; and nobody reads stage readStage any more
                // fragment 0 of tile t+1 (on the last iteration this reads a stage that holds
                // zeros or stale data; the values are never used)
                load_frag(0, As + nextStage * AS_STAGE, Bs + nextStage * BS_STAGE, 0);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += fa[k & 1][i] * fb[k & 1][j];
        }

        writeStage = readStage;        // tile t+STAGES goes where tile t was
        readStage = nextStage;
    }

    // epilogue: float4 read-modify-write (col % 4 == 0, N % 4 == 0: a float4 is all-in or all-out)
#pragma unroll
    for (int g = 0; g < TM / 4; ++g)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = rowBase + aOff + g * LM * 4 + i;
            if (row >= M) continue;
#pragma unroll
            for (int h = 0; h < TN / 4; ++h) {
                const int col = colBase + bOff + h * LN * 4;
                if (col >= N) continue;
                const float* a = &acc[g * 4 + i][h * 4];
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

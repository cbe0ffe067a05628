// 13_async_kmajor: 12's cp.async ring with A kept k-major in shared memory, so both operands
// travel by 16-byte copies, and the fragments walk k four steps at a time.
//
// Changed from 12: 12 transposes A on its way to shared memory (As[k][m]) so that a lane's TM
// rows at one k load as LDS.128; a copy engine cannot transpose, so each A element is its own
// 4-byte cp.async (8 LDGSTS a thread a tile at 64x128x16, and short_scoreboard/mio_throttle
// stalls in the profile). Here A stays as it is in global memory, As[m][k] (row pitch BK + 4
// floats), and both tiles are filled with 16-byte `cp.async.cg` (L2 only), zero-filled outside
// the matrices. The inner loop takes k in quads: the B fragments of 4 consecutive k (4 x TN
// values, LDS.128 along n) are loaded once, then each of the lane's TM rows gives one LDS.128
// along k, As[m][k..k+3], whose 4 values feed 4 x TN FFMAs. Per k-quad: TN + TM LDS.128 for
// 4 x TM x TN FFMAs, the same ratio as 10-12, with no transposing stores and no staging
// registers; the ring keeps STAGES-1 tiles in flight with one barrier a tile.
// Lane layout: a warp's WM x WN tile is LM x LN lanes (LM = WM / TM, lane % LM is the row
// lane); a lane's rows are LM apart (m = lm + i * LM) and its columns are TN/4 float4 groups
// LN * 4 apart, so 8 lanes of a quarter-warp read rows lm..lm+7 at the same k: with the row
// pitch BK + 4 (= 4 words mod 32) those are 8 distinct 16-byte bank groups, no conflict; B
// reads of a quarter-warp are at most 2 distinct contiguous float4 (broadcast otherwise).
// Why it should help: 10's winner exposes the global-load latency every tile (long_scoreboard
// 0.40 and barrier 0.31 stalls an issue); 12 hides it but pays 4-byte copies for A. Here the
// latency is hidden, the copies are 4x fewer for A, and no register holds a staged tile, so a
// 64x128 tile keeps 10's 4 blocks (16 warps) an SM.
// What the profiler should show: LDGSTS.E.BYPASS.128 only (no LDG/STS in the main loop);
// smsp__average_warps_issue_stalled_long_scoreboard and _barrier well below 10's; shared
// load bank conflicts ~0; sm__pipe_fma_cycles_active above 10's 67.6 %.
//
// Sizes: any M and N remainder and any K remainder (zero-filled copies), with K % 4 == 0 and
// N % 4 == 0 (16-byte copies and float4 C accesses need aligned row starts).
// Launch: grid (cdiv(N, BN), cdiv(M, BM)), block (NUM_THREADS = (BM/WM)*(BN/WN)*32),
// dynamic shared memory STAGES * (BM * (BK + 4) + BK * BN) * 4 bytes.
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
#error "NUM_THREADS must be defined"
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

#define LM ((WM) / (TM))
#define LN ((WN) / (TN))
#define APITCH ((BK) + 4)

static_assert((BM / WM) * (BN / WN) * 32 == NUM_THREADS, "one warp per warp tile");
static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
static_assert(WM % TM == 0 && WN % TN == 0 && LM * LN == 32, "32 lanes cover the warp tile");
static_assert(TN % 4 == 0 && BK % 4 == 0 && BN % 4 == 0, "float4 fragments and copies");
static_assert((BM * BK / 4) % NUM_THREADS == 0, "A copies cover BM x BK exactly");
static_assert((BK * BN / 4) % NUM_THREADS == 0, "B copies cover BK x BN exactly");
static_assert(STAGES >= 2, "a ring needs two stages");

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, bool valid)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int bytes = valid ? 16 : 0;  // 0: nothing read, 16 zero bytes written
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
sgemm_async_kmajor(int M, int N, int K, float alpha, const float* __restrict__ A,
                   const float* __restrict__ B, float beta, float* __restrict__ C)
{
    extern __shared__ __align__(16) float smem[];
    float* As = smem;                                // STAGES x [BM][APITCH]
    float* Bs = smem + STAGES * BM * APITCH;         // STAGES x [BK][BN]

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
    const int lm = lane % LM, ln = lane / LM;
    const int rowBase = blockIdx.y * BM, colBase = blockIdx.x * BN;

    // one tile's copies into stage st: A as [m][k] rows of BK/4 chunks, B as [k][n]
    auto issue = [&](int k0, int st) {
        float* as = As + st * BM * APITCH;
        float* bs = Bs + st * BK * BN;
#pragma unroll
        for (int l = 0; l < BM * BK / 4 / NUM_THREADS; ++l) {
            const int c = tid + l * NUM_THREADS;
            const int r = c / (BK / 4), q = c % (BK / 4);
            const int gr = rowBase + r, gc = k0 + q * 4;
            const bool ok = gr < M && gc < K;
            cp_async16(&as[r * APITCH + q * 4], ok ? &A[gr * K + gc] : A, ok);
        }
#pragma unroll
        for (int l = 0; l < BK * BN / 4 / NUM_THREADS; ++l) {
            const int c = tid + l * NUM_THREADS;
            const int r = c / (BN / 4), q = c % (BN / 4);
            const int gr = k0 + r, gc = colBase + q * 4;
            const bool ok = gr < K && gc < N;
            cp_async16(&bs[r * BN + q * 4], ok ? &B[gr * N + gc] : B, ok);
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    const int tiles = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) issue(s * BK, s);
        cp_async_commit();
    }
    for (int t = 0; t < tiles; ++t) {
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile t landed
        __syncthreads();              // everyone's; and stage (t-1)%S is no longer read
        if (t + STAGES - 1 < tiles) issue((t + STAGES - 1) * BK, (t + STAGES - 1) % STAGES);
        cp_async_commit();            // an empty group past the end keeps the count exact
        const float* as = As + (t % STAGES) * BM * APITCH;
        const float* bs = Bs + (t % STAGES) * BK * BN;
#pragma unroll
        for (int kq = 0; kq < BK; kq += 4) {
            float b[4][TN];
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
#pragma unroll
                for (int g = 0; g < TN / 4; ++g) {
                    const float4 v = *reinterpret_cast<const float4*>(
                        &bs[(kq + kk) * BN + wn0 + ln * 4 + g * LN * 4]);
                    b[kk][g * 4 + 0] = v.x; b[kk][g * 4 + 1] = v.y;
                    b[kk][g * 4 + 2] = v.z; b[kk][g * 4 + 3] = v.w;
                }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const float4 a = *reinterpret_cast<const float4*>(
                    &as[(wm0 + lm + i * LM) * APITCH + kq]);
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a.x * b[0][j];
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a.y * b[1][j];
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a.z * b[2][j];
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a.w * b[3][j];
            }
        }
    }
    cp_async_wait<0>();

    // epilogue: float4 read-modify-write (N % 4 == 0: a float4 is all-in or all-out)
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBase + wm0 + lm + i * LM;
        if (row >= M) continue;
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
            const int col = colBase + wn0 + ln * 4 + g * LN * 4;
            if (col >= N) continue;
            float4* cp = reinterpret_cast<float4*>(&C[row * N + col]);
            float4 r = make_float4(alpha * acc[i][g * 4 + 0], alpha * acc[i][g * 4 + 1],
                                   alpha * acc[i][g * 4 + 2], alpha * acc[i][g * 4 + 3]);
            if (beta != 0.0f) {
                const float4 c = *cp;
                r.x += beta * c.x; r.y += beta * c.y; r.z += beta * c.z; r.w += beta * c.w;
            }
            *cp = r;
        }
    }
}

// 04_blocktiling_1d: 1D blocktiling, each thread computes TM results of one column of C.
//
// Changed from 03: the block tile is BM x BN with a BK-deep K slice; each of the BM*BN/TM threads
// keeps TM accumulators (a TM x 1 column strip). Per k step a thread loads one B value into a
// register and reuses it for TM FMAs; the TM A values are read from shared memory as warp-wide
// broadcasts (all lanes of a warp share threadRow when BN >= 32).
// Why it should help: 03 does 2 shared loads per FMA; here it is (TM + 1) / TM, about 1.1 per FMA
// (8 + 1 loads per 8 FMAs), and there are TM x fewer threads/barrier participants per output.
// What the profiler should show: smsp__inst_executed_pipe_lsu / FFMA ratio drops ~2x versus 03,
// achieved FP32 throughput (sm__sass_thread_inst_executed_op_ffma_pred_on) roughly triples;
// main stall becomes mio_throttle/short_scoreboard on the As broadcasts.
//
// Fully general: any M, N, K (out-of-range tile elements are zero-filled, stores guarded).
// Launch: grid (cdiv(N, BN), cdiv(M, BM)), block (BM * BN / TM), no dynamic smem.
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
#ifndef TM
#error "TM must be defined"
#endif

#define NUM_THREADS ((BM) * (BN) / (TM))

static_assert(BM % TM == 0, "BM must be a multiple of TM");
static_assert(NUM_THREADS >= 32 && NUM_THREADS <= 1024, "BM*BN/TM threads must be 32..1024");
static_assert((BM * BK) % NUM_THREADS == 0, "A tile (BM*BK) must split evenly over the threads");
static_assert((BN * BK) % NUM_THREADS == 0, "B tile (BK*BN) must split evenly over the threads");
static_assert((BM * BK + BK * BN) * 4 <= 48 * 1024, "static shared memory over 48 KiB");

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
sgemm_blocktiling_1d(int M, int N, int K, float alpha, const float* __restrict__ A,
                     const float* __restrict__ B, float beta, float* __restrict__ C)
{
    __shared__ float As[BM * BK];   // row-major BM x BK
    __shared__ float Bs[BK * BN];   // row-major BK x BN

    const int tid = threadIdx.x;
    const int threadCol = tid % BN;   // one column of C per thread
    const int threadRow = tid / BN;   // which TM-strip of rows
    const int rowBase = blockIdx.y * BM;
    const int colBase = blockIdx.x * BN;

    float acc[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) acc[i] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Coalesced loads: consecutive threads take consecutive k (A) / consecutive n (B).
#pragma unroll
        for (int it = 0; it < BM * BK / NUM_THREADS; ++it) {
            const int e = tid + it * NUM_THREADS;
            const int r = e / BK, c = e % BK;
            const int gr = rowBase + r, gc = k0 + c;
            As[e] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;
        }
#pragma unroll
        for (int it = 0; it < BK * BN / NUM_THREADS; ++it) {
            const int e = tid + it * NUM_THREADS;
            const int r = e / BN, c = e % BN;
            const int gr = k0 + r, gc = colBase + c;
            Bs[e] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;
        }
        __syncthreads();

#pragma unroll
        for (int dot = 0; dot < BK; ++dot) {
            const float b = Bs[dot * BN + threadCol];
#pragma unroll
            for (int i = 0; i < TM; ++i)
                acc[i] += As[(threadRow * TM + i) * BK + dot] * b;
        }
        __syncthreads();
    }

    const int col = colBase + threadCol;
    if (col < N) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int row = rowBase + threadRow * TM + i;
            if (row < M) {
                float* c = C + row * N + col;
                *c = (beta == 0.0f) ? alpha * acc[i] : alpha * acc[i] + beta * (*c);
            }
        }
    }
}

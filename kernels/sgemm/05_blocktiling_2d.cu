// 05_blocktiling_2d: 2D blocktiling, each thread computes a TM x TN tile of C.
//
// Changed from 04: a thread now owns TM x TN accumulators. Per k step it copies TM values of the
// A column and TN values of the B row from shared memory into registers (regM, regN) and does the
// TM*TN outer-product FMAs from registers.
// Why it should help: shared loads per FMA fall from (TM+1)/TM (~1.1 in 04) to (TM+TN)/(TM*TN)
// (0.25 at 8x8), and the block computes BM*BN = 16K outputs with 256 threads, so arithmetic
// intensity per global byte doubles as well.
// What the profiler should show: LSU instructions per FFMA ~4x lower than 04 (smsp__inst_executed_pipe_lsu);
// FFMA issue share rises; remaining waste: regM is gathered with 8 scalar LDS per k (As is
// row-major, the TM values are BK apart), two threadRows per warp hit the same bank (2-way
// l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld), and global loads are 32-bit.
// Occupancy: ptxas gives 130 registers at 8x8, so only 1 block of 256 threads (8 warps) fits per
// SM (capping at 128 with __launch_bounds__(256, 2) spills); achieved occupancy ~12.5%.
//
// Fully general: any M, N, K (out-of-range tile elements are zero-filled, stores guarded).
// Launch: grid (cdiv(N, BN), cdiv(M, BM)), block (BM * BN / (TM * TN)), no dynamic smem.
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
#ifndef TN
#error "TN must be defined"
#endif

#define NUM_THREADS ((BM) * (BN) / ((TM) * (TN)))

static_assert(BM % TM == 0 && BN % TN == 0, "BM % TM and BN % TN must be 0");
static_assert(NUM_THREADS >= 32 && NUM_THREADS <= 1024, "BM*BN/(TM*TN) threads must be 32..1024");
static_assert((BM * BK) % NUM_THREADS == 0, "A tile (BM*BK) must split evenly over the threads");
static_assert((BN * BK) % NUM_THREADS == 0, "B tile (BK*BN) must split evenly over the threads");
static_assert((BM * BK + BK * BN) * 4 <= 48 * 1024, "static shared memory over 48 KiB");

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
sgemm_blocktiling_2d(int M, int N, int K, float alpha, const float* __restrict__ A,
                     const float* __restrict__ B, float beta, float* __restrict__ C)
{
    __shared__ float As[BM * BK];   // row-major BM x BK
    __shared__ float Bs[BK * BN];   // row-major BK x BN

    const int tid = threadIdx.x;
    const int threadCol = tid % (BN / TN);
    const int threadRow = tid / (BN / TN);
    const int rowBase = blockIdx.y * BM;
    const int colBase = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    float regM[TM], regN[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
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
#pragma unroll
            for (int i = 0; i < TM; ++i) regM[i] = As[(threadRow * TM + i) * BK + dot];
#pragma unroll
            for (int j = 0; j < TN; ++j) regN[j] = Bs[dot * BN + threadCol * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBase + threadRow * TM + i;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = colBase + threadCol * TN + j;
            if (col < N) {
                float* c = C + row * N + col;
                *c = (beta == 0.0f) ? alpha * acc[i][j] : alpha * acc[i][j] + beta * (*c);
            }
        }
    }
}

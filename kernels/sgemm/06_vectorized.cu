// 06_vectorized: 128-bit global loads/stores, A tile stored transposed in shared memory.
//
// Changed from 05: (1) global A, B and C are accessed as float4 (LDG.E.128 / STG.E.128);
// (2) the A tile is written to shared memory transposed, As[k][m] (BK x BM), so the TM values a
// thread needs at step k are contiguous and come in as TM/4 LDS.128 instead of TM scalar LDS
// with a BK stride; regN likewise is TN/4 LDS.128.
// Why it should help: 4x fewer global load instructions, and shared loads per k drop from
// TM + TN/4 (8 + 2 at 8x8) to (TM + TN)/4 (4), so FFMA gets a larger share of issue slots.
// What the profiler should show: global ld instructions 4x fewer (smsp__inst_executed_op_global_ld),
// LDS.128 only in the inner loop, higher sm__pipe_fma_cycles_active. Expected new waste (to be
// confirmed by ncu, fixed in 07/08): bank conflicts on the transposed scalar stores into As
// (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st) and on the LDS.128 reads of Bs
// (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld).
// MEASURED (ncu on the H200 at 4096^3): 268.5 M shared-load and 20.8 M shared-store bank
// conflicts; see 07 and 08 for which of them their fixes remove.
//
// Sizes: any M and N remainder and any K remainder are handled (per-float4 guards, zero fill),
// but 16-byte accesses need K % 4 == 0 and N % 4 == 0 (row starts of A, B, C 16-byte aligned;
// a float4 is then either wholly inside or wholly outside the matrix). Buffers are 256-B aligned.
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
static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN must be multiples of 4 (LDS.128 fragments)");
static_assert(BK % 4 == 0 && BN % 4 == 0, "BK and BN must be multiples of 4 (float4 loads)");
static_assert(NUM_THREADS >= 32 && NUM_THREADS <= 1024, "BM*BN/(TM*TN) threads must be 32..1024");
static_assert(NUM_THREADS % (BK / 4) == 0 && BM % (NUM_THREADS / (BK / 4)) == 0,
              "A tile: the float4 loads must cover BM x BK exactly");
static_assert(NUM_THREADS % (BN / 4) == 0 && BK % (NUM_THREADS / (BN / 4)) == 0,
              "B tile: the float4 loads must cover BK x BN exactly");
static_assert((BM * BK + BK * BN) * 4 <= 48 * 1024, "static shared memory over 48 KiB");

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
sgemm_vectorized(int M, int N, int K, float alpha, const float* __restrict__ A,
                 const float* __restrict__ B, float beta, float* __restrict__ C)
{
    __shared__ __align__(16) float As[BK * BM];   // transposed: As[k * BM + m]
    __shared__ __align__(16) float Bs[BK * BN];   // Bs[k * BN + n]

    const int tid = threadIdx.x;
    const int threadCol = tid % (BN / TN);
    const int threadRow = tid / (BN / TN);
    const int rowBase = blockIdx.y * BM;
    const int colBase = blockIdx.x * BN;

    // global -> shared mapping: each thread moves float4s
    const int innerRowA = tid / (BK / 4), innerColA = tid % (BK / 4);   // A: row m, k-quad
    constexpr int strideA = NUM_THREADS / (BK / 4);
    const int innerRowB = tid / (BN / 4), innerColB = tid % (BN / 4);   // B: row k, n-quad
    constexpr int strideB = NUM_THREADS / (BN / 4);

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    float regM[TM], regN[TN];

    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int off = 0; off < BM; off += strideA) {
            const int r = innerRowA + off;
            const int gr = rowBase + r, gc = k0 + innerColA * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (gr < M && gc < K) v = *reinterpret_cast<const float4*>(&A[gr * K + gc]);
            As[(innerColA * 4 + 0) * BM + r] = v.x;
            As[(innerColA * 4 + 1) * BM + r] = v.y;
            As[(innerColA * 4 + 2) * BM + r] = v.z;
            As[(innerColA * 4 + 3) * BM + r] = v.w;
        }
#pragma unroll
        for (int off = 0; off < BK; off += strideB) {
            const int r = innerRowB + off;
            const int gr = k0 + r, gc = colBase + innerColB * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (gr < K && gc < N) v = *reinterpret_cast<const float4*>(&B[gr * N + gc]);
            *reinterpret_cast<float4*>(&Bs[r * BN + innerColB * 4]) = v;
        }
        __syncthreads();

#pragma unroll
        for (int dot = 0; dot < BK; ++dot) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 a = *reinterpret_cast<const float4*>(&As[dot * BM + threadRow * TM + i]);
                regM[i] = a.x; regM[i + 1] = a.y; regM[i + 2] = a.z; regM[i + 3] = a.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 b = *reinterpret_cast<const float4*>(&Bs[dot * BN + threadCol * TN + j]);
                regN[j] = b.x; regN[j + 1] = b.y; regN[j + 2] = b.z; regN[j + 3] = b.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += regM[i] * regN[j];
        }
        __syncthreads();
    }

    // epilogue: float4 read-modify-write of C (col % 4 == 0 and N % 4 == 0: all-in or all-out)
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = rowBase + threadRow * TM + i;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const int col = colBase + threadCol * TN + j;
            if (col >= N) continue;
            float4* cp = reinterpret_cast<float4*>(&C[row * N + col]);
            float4 r;
            r.x = alpha * acc[i][j]; r.y = alpha * acc[i][j + 1];
            r.z = alpha * acc[i][j + 2]; r.w = alpha * acc[i][j + 3];
            if (beta != 0.0f) {
                const float4 c = *cp;
                r.x += beta * c.x; r.y += beta * c.y; r.z += beta * c.z; r.w += beta * c.w;
            }
            *cp = r;
        }
    }
}

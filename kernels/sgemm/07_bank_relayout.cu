// 07_bank_relayout: remove 06's shared-memory bank conflicts by re-laying out the buffers.
//
// Changed from 06: same algorithm and tiles; only the placement of elements inside As and Bs changes.
// Conflicts EXPECTED in 06 (expected, to be confirmed by ncu), for BM=BN=128, BK=8, TM=TN=8, 256 threads:
//  (1) Bs, loads (the larger one): in the inner loop the 16 threadCols of a warp each read an LDS.128 at
//      Bs[k][threadCol*8 + q*4]: 16 distinct 16-byte words 32 B apart span 512 B, so threadCols c and c+4
//      share banks: 4 wavefronts per LDS.128 where the 256 B of distinct data need 2 (2-way conflict,
//      16 of the 32 LDS.128 per k-tile per thread).
//  (2) As, stores: the transposed scalar stores As[(kq*4+j)*BM + m]: a warp covers 16 rows m and 2
//      k-quads kq; BM = 128 is a multiple of 32, so kq=0 and kq=1 of the same m hit the same bank
//      (2-way at BK=8, 4-way at BK=16).
// Fix by re-layout (no extra memory):
//  Bs: "thread-interleaved" order. Logical column n = tc*TN + q*4 + r (tc = owning threadCol, q = which
//      float4 of its TN) is stored at ((q*(BN/TN) + tc)*4 + r). A warp's LDS.128 for a given q now reads
//      16 consecutive float4 (256 B): conflict-free. A float4 from global stays contiguous, and a warp's
//      32 STS.128 of one B row land on 32 distinct slots: still conflict-free.
//  As: XOR swizzle of the m index by the k-quad: As[k*BM + (m ^ ((k/4) * (128/BK)))]. The rows a warp
//      stores for different k-quads move to different 16-bank (BK=8) halves: stores conflict-free.
//      The XOR key is a multiple of 4, so each float4 the compute loop reads stays contiguous/aligned.
// Why it should help: shared-memory wavefronts per k-tile drop by ~1/3 (Bs loads 64 -> 32 per warp).
// What the profiler should show: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum and
// ..._op_st.sum drop to ~0; l1tex__data_pipe_lsu_wavefronts_mem_shared falls; fewer mio_throttle stalls.
// MEASURED (ncu on the H200 at 4096^3, worklogs/nvidia-h200/sgemm/data/profile.parquet):
//   shared-load conflicts  06: 268.5 M  ->  07: 0.026 M   the conflicting buffer was Bs (loads): fixed
//   shared-store conflicts 06:  20.8 M  ->  07: 22.8 M    NOT fixed: the As swizzle leaves the store
//   conflicts where they were (08's padding cuts them to 4.0 M). The counters are per kernel, not
//   per buffer, so the stores are not split between the As scalar stores and the Bs STS.128 here.
//   07 runs 9 % faster than 06 (37.6 vs 34.4 TFLOP/s): the load conflicts were the ones that cost.
//
// Sizes: as 06 (any M, N, K remainder; K % 4 == 0 and N % 4 == 0 for the 16-byte accesses).
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
static_assert(BM % 32 == 0, "As swizzle: BM must be a multiple of 32 (XOR key < 32 stays inside the row)");
static_assert(BK <= 32 && (128 / BK) % 4 == 0, "As swizzle: key (k/4)*(128/BK) must be a multiple of 4");

// As: logical (k, m) -> physical; XOR key depends on the k-quad only, multiple of 4 (< 32).
#define AS_IDX(k, m) ((k) * BM + ((m) ^ (((k) / 4) * (128 / BK))))
// Bs: logical (k, n) -> physical; float4 q of threadCol tc lives at float4 slot q*(BN/TN) + tc.
#define BS_IDX(k, n) ((k) * BN + ((((n) % TN) / 4) * (BN / TN) + (n) / TN) * 4 + (n) % 4)

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
sgemm_bank_relayout(int M, int N, int K, float alpha, const float* __restrict__ A,
                 const float* __restrict__ B, float beta, float* __restrict__ C)
{
    __shared__ __align__(16) float As[BK * BM];   // transposed + swizzled: As[AS_IDX(k, m)]
    __shared__ __align__(16) float Bs[BK * BN];   // thread-interleaved: Bs[BS_IDX(k, n)]

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
            As[AS_IDX(innerColA * 4 + 0, r)] = v.x;
            As[AS_IDX(innerColA * 4 + 1, r)] = v.y;
            As[AS_IDX(innerColA * 4 + 2, r)] = v.z;
            As[AS_IDX(innerColA * 4 + 3, r)] = v.w;
        }
#pragma unroll
        for (int off = 0; off < BK; off += strideB) {
            const int r = innerRowB + off;
            const int gr = k0 + r, gc = colBase + innerColB * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (gr < K && gc < N) v = *reinterpret_cast<const float4*>(&B[gr * N + gc]);
            *reinterpret_cast<float4*>(&Bs[BS_IDX(r, innerColB * 4)]) = v;
        }
        __syncthreads();

#pragma unroll
        for (int dot = 0; dot < BK; ++dot) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 a = *reinterpret_cast<const float4*>(&As[AS_IDX(dot, threadRow * TM + i)]);
                regM[i] = a.x; regM[i + 1] = a.y; regM[i + 2] = a.z; regM[i + 3] = a.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                // == Bs[BS_IDX(dot, threadCol * TN + j)], written out so no % / remains
                const float4 b = *reinterpret_cast<const float4*>(&Bs[dot * BN + ((j / 4) * (BN / TN) + threadCol) * 4]);
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

// 08_bank_padding: remove the same shared-memory bank conflicts as 07, by padding instead of re-layout.
//
// Changed from 06 (07 is the alternative fix): same algorithm and tiles; As and Bs get unused pad words.
// Conflicts EXPECTED in 06 (expected, to be confirmed by ncu), for BM=BN=128, BK=8, TM=TN=8, 256 threads:
//  (1) Bs, loads: a warp's LDS.128 at Bs[k][threadCol*8 + q*4] (16 threadCols, 32 B apart) is a 2-way
//      conflict (threadCols c and c+4 share banks).
//  (2) As, stores: transposed scalar stores As[(kq*4+j)*BM + m]; kq = 0/1 of the same m share a bank
//      because the row length BM = 128 is a multiple of 32 words (2-way at BK=8).
// Fix by padding:
//  As: the classic one, pad each k-row to BM + 4 words. kq=1 rows then start 4*4 = 16 banks later, so the
//      16 m x 2 kq stores of a warp cover all 32 banks. (+4, not +1, keeps rows 16-byte aligned for the
//      LDS.128 reads; at BK=16 this would leave a 2-way conflict, at BK=8 none.)
//  Bs: padding the row length cannot help conflict (1): the colliding addresses are in the SAME k-row.
//      So the pad goes inside the row: 4 unused words after every 32 columns (row length BN + BN/8).
//      Logical n lives at n + (n/32)*4: threadCols c and c+4 now differ by 36 words (bank shift 4), and
//      the 16 distinct float4 of a warp's LDS.128 cover every bank exactly twice: the minimum 2 wavefronts.
//      The B-tile STS.128 stay conflict-free (each 32-column segment is one contiguous 128-B row).
// Cost: (BK*4 + BK*BN/8) * 4 bytes of extra shared memory (640 B here), no extra instructions beyond 07.
// What the profiler should show: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum and
// ..._op_st.sum drop to ~0, as in 07; time about equal to 07.
// MEASURED (ncu on the H200 at 4096^3, worklogs/nvidia-h200/sgemm/data/profile.parquet):
//   shared-load conflicts  06: 268.5 M  ->  08: 0.14 M    Bs loads: fixed by the in-row pad
//   shared-store conflicts 06:  20.8 M  ->  08: 4.0 M     5x fewer, not ~0 (07's swizzle: 22.8 M)
//   Same speed as 07 (37.4 vs 37.6 TFLOP/s): the remaining store conflicts do not cost time.
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
static_assert(BN % 32 == 0, "Bs padding: BN must be a multiple of 32");

#define AS_LD (BM + 4)                      // padded As row (one k), 16-byte multiple
#define BS_LD (BN + (BN / 32) * 4)          // padded Bs row: 4 pad words after every 32 columns
#define AS_IDX(k, m) ((k) * AS_LD + (m))
#define BS_IDX(k, n) ((k) * BS_LD + (n) + ((n) / 32) * 4)

static_assert((BK * AS_LD + BK * BS_LD) * 4 <= 48 * 1024, "static shared memory over 48 KiB");

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
sgemm_bank_padding(int M, int N, int K, float alpha, const float* __restrict__ A,
                 const float* __restrict__ B, float beta, float* __restrict__ C)
{
    __shared__ __align__(16) float As[BK * AS_LD];   // transposed, padded rows: As[AS_IDX(k, m)]
    __shared__ __align__(16) float Bs[BK * BS_LD];   // padded every 32 columns:  Bs[BS_IDX(k, n)]

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
                const float4 b = *reinterpret_cast<const float4*>(&Bs[BS_IDX(dot, threadCol * TN + j)]);
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

// Step 01: naive, three kernels, the score matrix materialized in global memory.
//
// The variant launches three entries in order (the study's `then:`), all with the attention
// ABI plus a workspace W of B·H·S·S floats (the study's `workspace:`):
//   attn_naive_scores   W[bh, i, j] = scale·q_i·k_j (−inf above the diagonal when causal);
//                       a thread per score, 16x16 threads a block, q and k read from global
//   attn_naive_softmax  a block per row of W: max, sum, then W ← exp(W − max)/sum in place,
//                       L ← max + log(sum)
//   attn_naive_pv       a thread per output element: O[i, d] = Σ_j W[i, j]·v[j, d]
// Why it is the start: it is the definition, written as three library calls would run it.
// It moves B·H·S² floats through DRAM three times (write, read + write, read): at S = 4096
// that is 4.3 GB a launch, and the S² buffer bounds S (the study requires S <= 4096).
// What ncu should show: scores and P·V kernels FFMA/LSU-bound with uncoalesced K reads in
// the first, the softmax kernel at DRAM bandwidth; together far below any tensor-core rate.
#include <cuda_bf16.h>

#define ABI                                                                                \
    int B, int H, int S, int D, float scale, int causal, const __nv_bfloat16 *Q,           \
        const __nv_bfloat16 *K, const __nv_bfloat16 *V, __nv_bfloat16 *O, float *L, float *W

extern "C" __global__ void attn_naive_scores(ABI) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    const size_t bh = blockIdx.z;
    if (i >= S || j >= S) return;
    const __nv_bfloat16* q = Q + (bh * S + i) * D;
    const __nv_bfloat16* k = K + (bh * S + j) * D;
    float s = 0.f;
    for (int d = 0; d < D; ++d) s = fmaf(__bfloat162float(q[d]), __bfloat162float(k[d]), s);
    W[(bh * S + i) * S + j] = (causal && j > i) ? -INFINITY : s * scale;
}

extern "C" __global__ void attn_naive_softmax(ABI) {
    __shared__ float red[32];
    const size_t row = (size_t)blockIdx.y * S + blockIdx.x;
    float* w = W + row * S;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < S; j += blockDim.x) m = fmaxf(m, w[j]);
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int k = 1; k < (int)(blockDim.x >> 5); ++k) m = fmaxf(m, red[k]);
    __syncthreads();
    float sum = 0.f;
    for (int j = threadIdx.x; j < S; j += blockDim.x) sum += __expf(w[j] - m);
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sum;
    __syncthreads();
    sum = red[0];
    for (int k = 1; k < (int)(blockDim.x >> 5); ++k) sum += red[k];
    const float inv = 1.f / sum;
    for (int j = threadIdx.x; j < S; j += blockDim.x) w[j] = __expf(w[j] - m) * inv;
    if (threadIdx.x == 0) L[row] = m + __logf(sum);
}

extern "C" __global__ void attn_naive_pv(ABI) {
    const int i = blockIdx.x * blockDim.y + threadIdx.y;
    const size_t bh = blockIdx.y;
    if (i >= S) return;
    const float* p = W + (bh * S + i) * S;
    const __nv_bfloat16* v = V + bh * S * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < S; ++j) acc = fmaf(p[j], __bfloat162float(v[(size_t)j * D + d]), acc);
        O[(bh * S + i) * D + d] = __float2bfloat16(acc);
    }
}

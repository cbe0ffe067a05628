// Step 02: fused, one thread block per query row, the score row kept on chip.
//
// What changed from 01: the three kernels become one. A block owns one query row i of one
// (b, h): it computes the S scores q_i·k_j into shared memory (4·S bytes: 64 KiB at S = 16384),
// reduces their max and sum there, and accumulates O[i, :] = Σ_j p_j v_j with a thread per
// output column.
// Why it helps: the B·H·S² score matrix never goes to DRAM (01 writes it once and reads it
// twice): DRAM traffic drops to Q, K, V, O... except that K and V are re-read by every query
// row (S times each): from L2 when they fit (K and V of one (b, h) are 2·S·D·2 bytes, 2 MiB at
// S = 4096, D = 128), else from DRAM. All arithmetic is SIMT FFMA on float32.
// What ncu should show: no tensor-core instructions; L2 hit rate high; the score loop
// (one thread reading one 256-byte K row) uncoalesced, LSU-bound with long-scoreboard stalls;
// at large S few blocks per SM (the 4·S-byte row) so occupancy falls with S.
#include <cuda_bf16.h>

#define NT 128

__device__ __forceinline__ float block_reduce(float v, float* red, bool is_max) {
    for (int o = 16; o; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    __syncthreads();  // red is reused
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < NT / 32; ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
    return v;
}

extern "C" __global__ void __launch_bounds__(NT)
    attn_fused_row(int B, int H, int S, int D, float scale, int causal, const __nv_bfloat16* Q,
                   const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O, float* L) {
    extern __shared__ float smem[];  // [S] scores, [D] q, [NT/32] reduction
    float* srow = smem;
    float* q = srow + S;
    float* red = q + D;
    const int i = blockIdx.x;
    const size_t bh = blockIdx.y;
    Q += (bh * S + i) * D;
    K += bh * S * D;
    V += bh * S * D;
    for (int d = threadIdx.x; d < D; d += NT) q[d] = __bfloat162float(Q[d]) * scale;
    __syncthreads();

    const int last = causal ? i : S - 1;  // keys past it are masked (their p is 0)
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= last; j += NT) {
        const __nv_bfloat162* k = reinterpret_cast<const __nv_bfloat162*>(K + (size_t)j * D);
        float s = 0.f;
        for (int d = 0; d < D / 2; ++d) {
            float2 kv = __bfloat1622float2(k[d]);
            s = fmaf(q[2 * d], kv.x, fmaf(q[2 * d + 1], kv.y, s));
        }
        srow[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_reduce(mx, red, true);
    float sum = 0.f;
    for (int j = threadIdx.x; j <= last; j += NT) {
        float p = __expf(srow[j] - mx);
        srow[j] = p;
        sum += p;
    }
    sum = block_reduce(sum, red, false);  // its barriers also publish srow
    const float inv = 1.f / sum;
    for (int d = threadIdx.x; d < D; d += NT) {
        float acc = 0.f;
        for (int j = 0; j <= last; ++j) acc = fmaf(srow[j], __bfloat162float(V[(size_t)j * D + d]), acc);
        O[(bh * S + i) * D + d] = __float2bfloat16(acc * inv);
    }
    if (threadIdx.x == 0) L[bh * S + i] = mx + __logf(sum);
}

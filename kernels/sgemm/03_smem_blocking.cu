// 03_smem_blocking: shared-memory cache blocking.
//
// Changed from 02 (global-memory coalescing): each block stages a BLOCKSIZE x BLOCKSIZE tile of A
// and of B in shared memory, synchronises, and every thread then runs its dot product over the
// tile from shared memory. Each global element is loaded once per block instead of once per
// thread (BLOCKSIZE-fold fewer global/L1 requests).
// Why it should help: 02 is bound by L1/L2 traffic; here the inner loop reads shared memory only.
// What the profiler should show: far fewer global load sectors (l1tex__t_sectors_pipe_lsu_mem_global_op_ld
// down ~BLOCKSIZE x); the kernel is now bound by shared-memory loads (2 LDS per FFMA, As read as a
// broadcast) and by the 1024-thread blocks' barriers (smsp__pcsamp stall "mio_throttle"/"short_scoreboard"
// and "barrier"); FFMA issue stays far below peak.
//
// Fully general: any M, N, K (tiles out of range are zero-filled, stores guarded).
// Launch: grid (cdiv(N, BLOCKSIZE), cdiv(M, BLOCKSIZE)), block (BLOCKSIZE * BLOCKSIZE), no dynamic smem.
// Indices are 32-bit: fine while M*K, K*N, M*N < 2^31 (all study sizes).

#ifndef BLOCKSIZE
#error "BLOCKSIZE must be defined"
#endif

static_assert(BLOCKSIZE >= 1 && BLOCKSIZE * BLOCKSIZE <= 1024, "BLOCKSIZE^2 threads must fit a block (<= 1024)");

extern "C" __global__ void __launch_bounds__(BLOCKSIZE * BLOCKSIZE)
sgemm_smem_blocking(int M, int N, int K, float alpha, const float* __restrict__ A,
                    const float* __restrict__ B, float beta, float* __restrict__ C)
{
    __shared__ float As[BLOCKSIZE * BLOCKSIZE];
    __shared__ float Bs[BLOCKSIZE * BLOCKSIZE];

    const int tx = threadIdx.x % BLOCKSIZE;   // column inside the tile (consecutive threads: consecutive n)
    const int ty = threadIdx.x / BLOCKSIZE;   // row inside the tile
    const int row = blockIdx.y * BLOCKSIZE + ty;
    const int col = blockIdx.x * BLOCKSIZE + tx;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BLOCKSIZE) {
        // A tile: rows blockIdx.y*BS.., cols k0.. ; B tile: rows k0.., cols blockIdx.x*BS..
        As[ty * BLOCKSIZE + tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty * BLOCKSIZE + tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BLOCKSIZE; ++k)
            acc += As[ty * BLOCKSIZE + k] * Bs[k * BLOCKSIZE + tx];
        __syncthreads();   // the tile is overwritten by the next iteration
    }

    if (row < M && col < N) {
        float* c = C + row * N + col;
        *c = (beta == 0.0f) ? alpha * acc : alpha * acc + beta * (*c);
    }
}

// 03 smem_padded: 02 with one float of padding per tile row: no bank conflicts.
//
// Changed from 02: the tile is TILE x (TILE + PAD). With PAD = 1 a tile row is 33 words, so
// the column read tile[tx][ty] (lanes tx = 0..31) lands on banks (33 * tx + ty) % 32 =
// (tx + ty) % 32: 32 different banks, one wavefront instead of 32. The row-wise store into the
// tile stays conflict-free. 4 KiB + 128 B of shared memory per block.
// Why it should help: the shared-memory replays that limited 02 are gone, so the kernel is
// bound by memory again; what is left is 1024-thread blocks that all wait at one barrier.
// Expect ~80 % of copy at 16384^2.
// What ncu should show: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum ~ 0 (against
// ~31 per request in 02), 4 sectors per global request, DRAM throughput up, barrier stalls
// (smsp__average_warps_issue_stalled_barrier) visible among the top stall reasons.
// Launch: block (TILE, TILE), grid (cdiv(N, TILE), cdiv(M, TILE)). Any M, N.

#ifndef TILE
#error "TILE must be defined"
#endif
#ifndef PAD
#error "PAD (floats of padding per tile row) must be defined"
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
transpose_smem_padded(int M, int N, const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float tile[TILE][TILE + PAD];
  const int tx = threadIdx.x, ty = threadIdx.y;
  int col = blockIdx.x * TILE + tx;
  int row = blockIdx.y * TILE + ty;
  if (row < M && col < N) tile[ty][tx] = in[(size_t)row * N + col];
  __syncthreads();
  col = blockIdx.y * TILE + tx;
  row = blockIdx.x * TILE + ty;
  if (row < N && col < M) out[(size_t)row * M + col] = tile[tx][ty];
}

// 02 smem_tiled: a TILE x TILE tile staged through shared memory, both global sides coalesced.
//
// Changed from 01: a block loads a TILE x TILE tile of the input row by row (coalesced) into
// shared memory, and after a barrier writes it out row by row of the OUTPUT, reading the tile
// by column: out[c][r] = tile[r][c]. Every global store is now a full 128-byte line.
// Why it should help: the 8x store-side transaction overhead of 01 is gone.
// The new waste, on purpose: the column read tile[tx][ty] has a stride of TILE = 32 floats, so
// the 32 lanes of a warp hit the same bank: a 32-way bank conflict, each shared load replayed
// 32 times (fixed in 03). One thread per element (TILE*TILE = 1024 threads per block).
// Expect ~50 % of copy at 16384^2: the shared-memory pipe, not DRAM, is the limit.
// What ncu should show: 4 sectors per request for global loads and stores;
// l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum ~ 31 x the shared load requests
// (M*N/32 warp loads x 31 extra wavefronts), stores into the tile conflict-free.
// Launch: block (TILE, TILE), grid (cdiv(N, TILE), cdiv(M, TILE)). Any M, N.

#ifndef TILE
#error "TILE must be defined"
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
transpose_smem(int M, int N, const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float tile[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  int col = blockIdx.x * TILE + tx;  // input column
  int row = blockIdx.y * TILE + ty;  // input row
  if (row < M && col < N) tile[ty][tx] = in[(size_t)row * N + col];
  __syncthreads();
  col = blockIdx.y * TILE + tx;  // output column = input row
  row = blockIdx.x * TILE + ty;  // output row = input column
  if (row < N && col < M) out[(size_t)row * M + col] = tile[tx][ty];
}

// 04 multi_element: the padded tile, but ROWS x TILE threads each moving TILE / ROWS elements.
//
// Changed from 03: the block is TILE x ROWS threads (32 x 8 = 256), and each thread loads and
// stores TILE / ROWS = 4 elements of the tile, ROWS rows apart. All its loads are issued
// before the barrier, all its stores after it.
// Why it should help: 4 independent loads per thread in flight instead of 1; the index
// arithmetic and the barrier are paid once per 4 elements; 256-thread blocks let 8 blocks
// share an SM, so while one waits at its barrier the others stream. Expect ~87 % of copy at
// 16384^2.
// What ncu should show: against 03, fewer instructions per element
// (smsp__inst_executed.sum / (M*N)), fewer barrier stalls, higher DRAM throughput; still 0
// bank conflicts and 4 sectors per global request.
// Launch: block (TILE, ROWS), grid (cdiv(N, TILE), cdiv(M, TILE)). Any M, N.

#ifndef TILE
#error "TILE must be defined"
#endif
#ifndef ROWS
#error "ROWS (thread rows per block) must be defined"
#endif
#ifndef PAD
#error "PAD (floats of padding per tile row) must be defined"
#endif
static_assert(TILE % ROWS == 0, "TILE must be a multiple of ROWS");

extern "C" __global__ void __launch_bounds__(TILE * ROWS)
transpose_multi(int M, int N, const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float tile[TILE][TILE + PAD];
  const int tx = threadIdx.x, ty = threadIdx.y;
  int col = blockIdx.x * TILE + tx;
  int row = blockIdx.y * TILE + ty;
  if (col < N) {
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS)
      if (row + j < M) tile[ty + j][tx] = in[(size_t)(row + j) * N + col];
  }
  __syncthreads();
  col = blockIdx.y * TILE + tx;
  row = blockIdx.x * TILE + ty;
  if (col < M) {
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS)
      if (row + j < N) out[(size_t)(row + j) * M + col] = tile[tx][ty + j];
  }
}

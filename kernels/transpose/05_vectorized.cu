// 05 vectorized: 128-bit global loads AND stores; the transpose happens in shared memory.
//
// Changed from 04: a thread moves float4s instead of floats. Loading, a thread reads 4
// consecutive floats of an input row (LDG.E.128) and puts them in the padded tile
// (4 scalar STS: with a 33-word row stride the 32 lanes, 4 rows x 8 float4, hit 32 different
// banks). Storing, a thread gathers 4 consecutive tile ROWS of one tile column, which are 4
// consecutive elements of an OUTPUT row, and writes them as one float4 (STG.E.128); the 4
// scalar LDS are again conflict-free, (4q + k + c) % 32 over the warp. TILE x TILE tile,
// THREADS threads, TILE * TILE / (4 * THREADS) float4 per thread each way.
// Why it should help: 4x fewer load/store instructions and requests than 04 for the same
// bytes, so the LSU and L1 request rate stop mattering; what remains is DRAM, as for the copy.
// Expect ~92 % of copy at 16384^2.
// What ncu should show: LDG.E.128 and STG.E.128 in the SASS (no 32-bit global accesses in the
// main path), ~M*N/4 global requests each way (a quarter of 04's) with 4 sectors each, 0 bank
// conflicts, DRAM bytes at the minimum, DRAM throughput close to the copy kernel's.
// Shapes: M % 4 == 0 and N % 4 == 0 (rows of in and out 16-byte aligned, and a float4 is then
// wholly inside or wholly outside the matrix); partial tiles at the edges are handled.
// Launch: block (THREADS), grid (cdiv(N, TILE), cdiv(M, TILE)).
// Optional STREAM=1 (06_tuned sweeps it): loads and stores carry the evict-first hint
// (__ldcs / __stcs, LDG.E.EF / STG.E.EF): every byte is touched once, so L2 need not keep it.
// Measured on the H200 at 16384^2 (ncu, worklogs/nvidia-h200/transpose): as 05 (32 x 32,
// 256 threads, 1 float4 each way a thread) 84 % of copy; as 06_tuned's winner (64 x 64, 512
// threads, 2 float4 a thread) 94.6 %, DRAM at 4035 GB/s beside the copy kernel's 4054, despite
// the 2-way bank conflict of the 65-word rows (8.9 M conflicts on the loads). The evict-first
// hint cost 3-5 points of copy at every tile shape and size, so it is off in the winner.

#ifndef TILE
#error "TILE must be defined"
#endif
#ifndef THREADS
#error "THREADS must be defined"
#endif
#ifndef PAD
#error "PAD (floats of padding per tile row) must be defined"
#endif
#ifndef STREAM
#define STREAM 0
#endif
#if STREAM
#define LOAD4(p) __ldcs(p)
#define STORE4(p, v) __stcs(p, v)
#else
#define LOAD4(p) (*(p))
#define STORE4(p, v) (*(p) = (v))
#endif
static_assert(TILE % 32 == 0, "TILE must be a multiple of 32");
static_assert((TILE * TILE / 4) % THREADS == 0, "THREADS must divide the tile's float4 count");

#define Q (TILE / 4)                            // float4 per tile row
#define PER_THREAD (TILE * TILE / 4 / THREADS)  // float4 per thread, each way

extern "C" __global__ void __launch_bounds__(THREADS)
transpose_vec4(int M, int N, const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float tile[TILE][TILE + PAD];
  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * TILE;  // first input row of the tile
  const int col0 = blockIdx.x * TILE;  // first input column of the tile
  float4 v[PER_THREAD];
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int idx = i * THREADS + tid;
    const int r = idx / Q, c = 4 * (idx % Q);
    if (row0 + r < M && col0 + c < N)
      v[i] = LOAD4(reinterpret_cast<const float4*>(in + (size_t)(row0 + r) * N + col0 + c));
  }
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int idx = i * THREADS + tid;
    const int r = idx / Q, c = 4 * (idx % Q);
    if (row0 + r < M && col0 + c < N) {
      tile[r][c + 0] = v[i].x;
      tile[r][c + 1] = v[i].y;
      tile[r][c + 2] = v[i].z;
      tile[r][c + 3] = v[i].w;
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int idx = i * THREADS + tid;
    const int c = idx / Q, r = 4 * (idx % Q);  // tile column c = output row; r..r+3 = output cols
    if (col0 + c < N && row0 + r < M) {
      const float4 w = make_float4(tile[r][c], tile[r + 1][c], tile[r + 2][c], tile[r + 3][c]);
      STORE4(reinterpret_cast<float4*>(out + (size_t)(col0 + c) * M + row0 + r), w);
    }
  }
}

// 01 naive: one thread per element, reads coalesced, writes strided.
//
// What it is: thread (x, y) of the grid reads in[row][col] and writes out[col][row].
// Consecutive threads of a warp (threadIdx.x) take consecutive columns of the input, so a
// warp's load is one 128-byte line; but they write down a column of the output, 32 floats
// that lie M floats apart: every store touches its own 32-byte sector, of which it uses 4
// bytes. L2 merges the partial sectors written by the BY warps of a block (8 rows = one full
// sector per column), so DRAM traffic stays near the minimum, but the L1/L2 transaction count
// on the store side is 8x that of a coalesced store, and that is the bottleneck.
// Expect ~35 % of copy at 16384^2.
// What ncu should show: l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum /
// l1tex__t_requests_pipe_lsu_mem_global_op_st.sum = 32 sectors per store request (4 for the
// loads), lts__t_bytes.sum far above dram__bytes.sum, DRAM throughput well below its peak.
// Launch: block (BX, BY), grid (cdiv(N, BX), cdiv(M, BY)). Any M, N.

#ifndef BX
#error "BX (threads along a row) must be defined"
#endif
#ifndef BY
#error "BY (rows per block) must be defined"
#endif

extern "C" __global__ void __launch_bounds__(BX * BY)
transpose_naive(int M, int N, const float* __restrict__ in, float* __restrict__ out) {
  const int col = blockIdx.x * BX + threadIdx.x;
  const int row = blockIdx.y * BY + threadIdx.y;
  if (row < M && col < N) out[(size_t)col * M + row] = in[(size_t)row * N + col];
}

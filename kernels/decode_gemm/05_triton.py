"""05_triton: the decode GEMV in Triton, a tile of W a program, x's batch rows on tensor cores.

y = x·Wᵀ with the hgemm kernel arguments (M, N, K, x, W, y): x M x K, W N x K, y M x N, all
bf16, row-major, FP32 accumulation.
What changed: written at the block level. Each program owns BLOCK_N rows of W and BLOCK_M
batch rows of x; it walks K in BLOCK_K steps, loading a BLOCK_N x BLOCK_K tile of W once and
the BLOCK_M x BLOCK_K tile of x, and multiplies them with tl.dot (wgmma or mma.sync for a
16-row M tile padded with zeros past M). W is read once for all the batch rows a program
holds (once in all for M <= BLOCK_M), as in 03; the FMAs go to the tensor cores, so the
x loads and the FP32 FMA issue that bound 03 at M = 16-32 go away.
Why it should help: at M = 1 the kernel is a stream of W at HBM bandwidth, which Triton's
vectorized, pipelined loads (NUM_STAGES) should reach; at M >= 8 the SIMT steps spend their
issue slots on FMAs, the tensor core does not.
What ncu should show: dram__bytes_read ~ 2 * N * K * cdiv(M, BLOCK_M); tensor pipe active
where M > 1; fewer instructions per byte than 03.
BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS and NUM_STAGES are a DAG fan-out (tune: in config).
"""

import triton
import triton.language as tl


@triton.jit
def decode_triton(
    M, N, K, x, W, y, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    xrow = x + rm[:, None].to(tl.int64) * K  # [BLOCK_M, 1]
    wcol = W + rn[None, :].to(tl.int64) * K  # [1, BLOCK_N]: W's rows as the tile's columns
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(xrow + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(wcol + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc)
    out = y + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(out, acc.to(y.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

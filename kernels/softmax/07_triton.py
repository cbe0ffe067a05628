"""07_triton: fused row softmax in Triton (float32 and bfloat16: the pointer type follows
the study's dtype, arithmetic is float32).

y[r, :] = softmax(x[r, :]) for an R x N row-major x: the .cu kernels' arguments (R, N, x, y).
What changed: one program per row, written at the block level. A row that fits in one
BLOCK_N-wide tile (N <= BLOCK_N) is loaded once, kept in registers, reduced (max, then sum of
exps) and written: x is read from DRAM once, like 05 when the row fits. Longer rows take the
online path: one sweep keeps a running max and a rescaled running sum per lane, a second sweep
re-reads the row (from L2 for rows in flight) and writes exp(x - max) / sum.
Why it should help: Triton vectorizes the loads (128-bit when N is a multiple of 4 and the
pointers 16-byte aligned; here it cannot assume either, so expect narrower loads than 05), and
the reductions become warp shuffles plus one shared-memory exchange, as in 03/04.
BLOCK_N, NUM_WARPS and NUM_STAGES are a DAG fan-out (tune: in config), not triton.autotune.
"""

import triton
import triton.language as tl


@triton.jit
def softmax_triton(R, N, x, y, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    if N <= BLOCK_N:
        mask = cols < N
        v = tl.load(x + base + cols, mask=mask, other=float("-inf")).to(tl.float32)
        e = tl.exp(v - tl.max(v, 0))
        e = tl.where(mask, e, 0.0)
        out = e / tl.sum(e, 0)
        tl.store(y + base + cols, out.to(y.dtype.element_ty), mask=mask)
    else:
        m = tl.full([BLOCK_N], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK_N], tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            v = tl.load(x + base + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, v)
            # lanes still at -inf (masked so far) keep s = 0 without a NaN from inf - inf
            scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
            s = s * scale + tl.where(mask, tl.exp(v - m_new), 0.0)
            m = m_new
        mx = tl.max(m, 0)
        total = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - mx)), 0)
        inv = 1.0 / total
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            v = tl.load(x + base + start + cols, mask=mask, other=0.0).to(tl.float32)
            out = tl.exp(v - mx) * inv
            tl.store(y + base + start + cols, out.to(y.dtype.element_ty), mask=mask)

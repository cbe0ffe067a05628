"""14_triton: the same SGEMM in Triton, FP32 with TF32 off.

C = alpha * A @ B + beta * C, row-major, A M x K, B K x N: the .cu kernels' arguments.
What changed: nothing is written by hand below the tile level. Each program computes one
BLOCK_M x BLOCK_N tile of C; tl.dot with input_precision="ieee" keeps FP32 FMAs (no TF32),
and Triton's compiler picks the register tiling, the shared-memory layout (swizzled, so no
bank conflicts), and a NUM_STAGES-deep cp.async pipeline. Programs are grouped GROUP_M tiles
tall along M so that neighbouring programs share A and B tiles in L2.
Why it should help: this is 10-12's design (warp tiles, multi-stage copies) for free; what it
cannot do is beat cuBLAS's hand-scheduled FFMA loops on register reuse. Expect ncu to show
FFMA-bound issue (no HMMA/GMMA: the TF32 path is off) and LDS.128-free shared loads (ldmatrix
is for 16-bit types; FP32 operands come through LDS).
The tile shape, depth and warp count are a DAG fan-out (tune: in config), not triton.autotune.
"""

import triton
import triton.language as tl


@triton.jit
def sgemm_triton(
    M,
    N,
    K,
    alpha,
    A,
    B,
    beta,
    C,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    group = pid // per_group
    first_m = group * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = A + rm[:, None].to(tl.int64) * K + rk[None, :]
    b_ptrs = B + rk[:, None].to(tl.int64) * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    c_ptrs = C + rm[:, None].to(tl.int64) * N + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    c = tl.load(c_ptrs, mask=mask, other=0.0)
    tl.store(c_ptrs, alpha * acc + beta * c, mask=mask)

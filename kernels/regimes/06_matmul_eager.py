# matmul, eager: C = A @ B, square BF16 matrices of n = round(sqrt(N)) (N elements each),
# one cuBLAS kernel with FP32 accumulation. 2 n^3 FLOP against 6 n^2 bytes: the arithmetic
# intensity grows like n/3, so past a few hundred thousand elements the op leaves the
# overhead regime straight for the compute-bound one (the BF16 tensor-core peak), skipping
# the memory-bound regime the elementwise ops end in.
from kernelbook.problems.regimes import eager, torch_operands


def run(case, **defines):
    t, y, shape = torch_operands(case, "matmul")
    return eager("matmul", t, y, shape, case.params)

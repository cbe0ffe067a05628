# chain, eager: y = tanh(1.5 x + 0.5) * x as four PyTorch calls (mul, add, tanh, mul), as
# written in a model's forward. Four launches, and every intermediate goes through device
# memory: 9 N element reads and writes against the 2 N a fused kernel needs (traffic 4.5).
# The same calls as the study's baseline: a control at about 100 %.
from kernelbook.problems.regimes import eager, torch_operands


def run(case, **defines):
    t, y, shape = torch_operands(case, "chain")
    return eager("chain", t, y, shape, case.params)

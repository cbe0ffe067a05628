# sum, eager: y = sum(x), one PyTorch reduction kernel (float32 accumulation) into a
# one-element output. Reads N elements, writes one: the bandwidth-bound twin of 01 with
# half the traffic, so its crossover from overhead- to memory-bound sits at about twice
# 01's N.
from kernelbook.problems.regimes import eager, torch_operands


def run(case, **defines):
    t, y, shape = torch_operands(case, "sum")
    return eager("sum", t, y, shape, case.params)

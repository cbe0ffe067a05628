# layernorm, eager: F.layer_norm over rows of H = min(N, 1024) elements with weight and
# bias, then a copy into the preallocated y (F.layer_norm has no out=): two launches, and
# the copy reads and writes the output once more (traffic 2). About 8 FLOP per element: a
# memory-bound op at large N, like the elementwise ones.
from kernelbook.problems.regimes import eager, torch_operands


def run(case, **defines):
    t, y, shape = torch_operands(case, "layernorm")
    return eager("layernorm", t, y, shape, case.params)

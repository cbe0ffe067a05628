# scale, eager: y = 2.5 x, one elementwise kernel (torch.mul into the preallocated y).
# The same call as the study's baseline, so it is a control: about 100 % of eager at every
# size. One launch, each element read once and written once: overhead-bound while the
# call's cost to its caller (dispatch and launch, host-timed) outlasts moving 4 N bytes,
# memory-bound beyond (the model's crossover is where launch overhead x copy bandwidth =
# 4 N bytes: about ten million elements on an H200, at ~9 us an eager op).
from kernelbook.problems.regimes import eager, torch_operands


def run(case, **defines):
    t, y, shape = torch_operands(case, "scale")
    return eager("scale", t, y, shape, case.params)

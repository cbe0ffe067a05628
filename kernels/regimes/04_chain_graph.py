# chain, CUDA graph: the eager chain's four kernels captured once in a CUDA graph and
# replayed: the same kernels and the same traffic as 02 (traffic 4.5), but one graph launch
# instead of four eager calls, so the per-op cost that sets the overhead regime shrinks
# from an eager op's dispatch and launch to an op's share of a replay
# (launch_overhead_graph_us in the device table, host-timed like the rows).
import torch

from kernelbook.problems.regimes import eager, torch_operands


def run(case, **defines):
    t, y, shape = torch_operands(case, "chain")
    fn = eager("chain", t, y, shape, case.params)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up outside the capture (allocator, library handles)
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph.replay

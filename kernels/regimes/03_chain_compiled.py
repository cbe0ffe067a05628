# chain, torch.compile: the same four ops traced by TorchDynamo and fused by Inductor into
# one Triton kernel that reads x once and writes y once (traffic 1, one launch), with
# float32 intermediates. Compiled during the setup, before anything is timed, one kernel per
# size (dynamic=False); the callable runs the compiled code only.
import torch
import torch._inductor.config

from kernelbook.problems.regimes import CHAIN_A, CHAIN_B, torch_operands


def _chain(x, y):
    y.copy_(torch.tanh(x * CHAIN_A + CHAIN_B) * x)


# Inductor compiles in this process: no pool of compile workers (one a core, each importing
# torch) starting up beside the timed calls. Measured on an H200 host with the pool: the
# eager chain timed beside this variant read 55 us a call, against 39 us in 02's job.
if hasattr(torch._inductor.config, "compile_threads"):
    torch._inductor.config.compile_threads = 1

# never fall back to eager after the default limit of 8 recompilations
for _name in ("recompile_limit", "cache_size_limit"):
    if hasattr(torch._dynamo.config, _name):
        setattr(torch._dynamo.config, _name, 256)

# Static shapes. By default torch.compile recompiles the second size as one kernel dynamic in
# N; measured so on an H200 (dec53ce), it moved 780 GB/s at N = 1e9 (5.12 ms, slower than the
# five eager ops' 4.35 ms). The hypothesis this tests: a dynamic N that Triton cannot prove a
# multiple of the vector width makes every load a 2-byte one.
_compiled = torch.compile(_chain, fullgraph=True, dynamic=False)


def run(case, **defines):
    t, y, shape = torch_operands(case, "chain")
    x = t["x"].reshape(-1)
    for _ in range(2):  # compile (first call), then one call of the compiled code
        _compiled(x, y)
    torch.cuda.synchronize()

    def call():
        _compiled(x, y)

    return call

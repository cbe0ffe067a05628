"""The device table: NVML and CUDA facts, theoretical peaks, and measured ceilings.

The ceilings (copy, L2, L1, cuBLAS) are GPU time: CUPTI kernel time where it attaches, else
the blocking-kernel events. The launch overheads are host-inclusive: what an eager op, and
an op replayed from a CUDA graph, costs its caller in the overhead regime (host time over
back-to-back calls, kernelbook.measure.host), which is what the regimes model needs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from kernelbook import gpu, provenance
from kernelbook.launch.kernel import device_sm_count
from kernelbook.measure.sizes import memcpy_launcher
from kernelbook.measure.timing import Timer

# FP32 lanes per SM and dense BF16 tensor FLOP per clock per SM, by compute capability.
# Hopper (9.0): 128 FP32 lanes; 1024 dense BF16 FMA per clock per SM in its tensor cores.
FP32_LANES = {(7, 0): 64, (8, 0): 64, (8, 6): 128, (8, 9): 128, (9, 0): 128}
BF16_FLOP_PER_CLOCK = {(8, 0): 2048, (9, 0): 4096}

COPY_BYTES = 2 * 1024**3
GEMM_N = 8192


def measure_device(project, slot_uuid: str, log: Callable[[str], None] = print) -> list[dict]:
    import cupy as cp
    import torch

    facts = gpu.device_facts(slot_uuid)
    props = cp.cuda.runtime.getDeviceProperties(0)
    cc = (int(props["major"]), int(props["minor"]))
    cuda = gpu.cuda_provenance(slot_uuid)
    prov = {
        **{k: cuda[k] for k in ("gpu_name", "gpu_uuid", "driver_version", "cuda_version")},
        **{k: v for k, v in gpu.host_provenance(project.root).items() if k != "kernelbook_version"},
    }
    rows: list[dict] = []

    def add(quantity, value, unit, kind, method):
        rows.append(
            {
                **prov,
                "quantity": quantity,
                "value": float(value),
                "unit": unit,
                "kind": kind,
                "method": method,
                "measured_at": provenance.now(),
            }
        )
        log(f"{quantity}: {value:g} {unit} ({kind})")

    sms = device_sm_count()
    add("sm_count", sms, "count", "fact", "cudaDeviceProp.multiProcessorCount")
    add("compute_capability", cc[0] + cc[1] / 10, "", "fact", "cudaDeviceProp.major.minor")
    add("l2_bytes", props["l2CacheSize"], "B", "fact", "cudaDeviceProp.l2CacheSize")
    add(
        "smem_per_block_optin_bytes",
        props["sharedMemPerBlockOptin"],
        "B",
        "fact",
        "cudaDeviceProp.sharedMemPerBlockOptin",
    )
    add(
        "smem_per_sm_bytes",
        props["sharedMemPerMultiprocessor"],
        "B",
        "fact",
        "cudaDeviceProp.sharedMemPerMultiprocessor",
    )
    add(
        "registers_per_sm",
        props["regsPerMultiprocessor"],
        "count",
        "fact",
        "cudaDeviceProp.regsPerMultiprocessor",
    )
    add("memory_total_bytes", facts["memory_total_bytes"], "B", "fact", "nvmlDeviceGetMemoryInfo")
    add(
        "sm_clock_max_mhz",
        facts["sm_clock_max_mhz"],
        "MHz",
        "fact",
        "nvmlDeviceGetMaxClockInfo(SM)",
    )
    add(
        "mem_clock_max_mhz",
        facts["mem_clock_max_mhz"],
        "MHz",
        "fact",
        "nvmlDeviceGetMaxClockInfo(MEM)",
    )
    add(
        "memory_bus_width_bits",
        facts["memory_bus_width_bits"],
        "bit",
        "fact",
        "nvmlDeviceGetMemoryBusWidth",
    )
    add("power_limit_w", facts["power_limit_w"], "W", "fact", "nvmlDeviceGetEnforcedPowerLimit")
    clock_hz = facts["sm_clock_max_mhz"] * 1e6
    if cc in FP32_LANES:
        add(
            "fp32_peak_tflops",
            sms * FP32_LANES[cc] * 2 * clock_hz / 1e12,
            "TFLOP/s",
            "theoretical",
            f"SMs x {FP32_LANES[cc]} FP32 lanes x 2 (FMA) x max SM clock",
        )
    if cc in BF16_FLOP_PER_CLOCK:
        add(
            "bf16_tensor_peak_tflops",
            sms * BF16_FLOP_PER_CLOCK[cc] * clock_hz / 1e12,
            "TFLOP/s",
            "theoretical",
            f"SMs x {BF16_FLOP_PER_CLOCK[cc]} dense BF16 FLOP/clock x max SM clock",
        )
    add(
        "dram_peak_gbps",
        facts["mem_clock_max_mhz"] * 1e6 * facts["memory_bus_width_bits"] * 2 / 8 / 1e9,
        "GB/s",
        "theoretical",
        "max memory clock x bus width x 2 (double data rate)",
    )

    policy = {**project.settings["timing"], "cache": "warm", "method": "events"}
    torch_stream = torch.cuda.Stream()
    stream = cp.cuda.ExternalStream(torch_stream.cuda_stream)
    with stream, torch.cuda.stream(torch_stream):
        # first, before this process attaches CUPTI: the host time of a call is the subject
        overheads = launch_overhead(project.settings["timing"], stream, torch_stream)
    for quantity, (us, method) in overheads.items():
        add(quantity, us, "us", "measured", method)
    timer = Timer(policy, int(props["l2CacheSize"]), stream, torch_stream)
    with stream, torch.cuda.stream(torch_stream):
        rng = cp.random.default_rng(project.settings["seed"])
        src = rng.standard_normal(COPY_BYTES // 4, dtype=cp.float32)
        dst = cp.empty_like(src)

        copy = memcpy_launcher(cp, dst, src, COPY_BYTES, stream.ptr)
        st = timer.measure({"copy": copy}, "device copy")["copy"]
        add(
            "copy_gbps",
            2 * COPY_BYTES / (st.median * 1e-3) / 1e9,
            "GB/s",
            "measured",
            f"cudaMemcpyAsync device-to-device of {COPY_BYTES} B, bytes read + written over "
            f"the {instrument_text(st)}",
        )
        del src, dst, copy  # the launcher holds the buffers
        cp.get_default_memory_pool().free_all_blocks()

        from kernelbook.measure import microbench

        for quantity, (gbps, method) in microbench.measure(
            timer, sms, int(props["l2CacheSize"]), int(project.settings["seed"])
        ).items():
            add(quantity, gbps, "GB/s", "measured", method)
        cp.get_default_memory_pool().free_all_blocks()

        torch.backends.cuda.matmul.allow_tf32 = False
        gen = torch.Generator(device="cuda").manual_seed(int(project.settings["seed"]))
        for dtype, name, mode in (
            (torch.float32, "cublas_fp32_tflops", "FP32, TF32 off"),
            (torch.bfloat16, "cublas_bf16_tflops", "BF16, FP32 accumulate"),
        ):
            a = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=dtype, generator=gen)
            b = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=dtype, generator=gen)
            c = torch.empty(GEMM_N, GEMM_N, device="cuda", dtype=dtype)
            st = timer.measure({name: lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)}, name)[name]
            add(
                name,
                2 * GEMM_N**3 / (st.median * 1e-3) / 1e12,
                "TFLOP/s",
                "measured",
                f"torch.matmul {GEMM_N}^3 random normal, {mode}, {instrument_text(st)}",
            )
            del a, b, c
        torch.cuda.empty_cache()
    return rows


def instrument_text(st) -> str:
    """'CUPTI kernel-time median', 'host wall-time median ...' or 'blocking-kernel event
    median (CUPTI ...: why)'."""
    if st.method == "cupti":
        return "CUPTI kernel-time median"
    if st.method == "host":
        return f"host wall-time median per call, {st.batch_calls} back-to-back calls a batch"
    return "blocking-kernel event median" + (f" ({st.note})" if st.note else "")


def write_device_table(project, out: Path, slot_uuid: str) -> None:
    from kernelbook import tables

    tables.write(
        measure_device(project, slot_uuid, lambda s: print(s, file=sys.stderr)), out, "device"
    )


# The launch-overhead rows: a chain of tiny elementwise bfloat16 ops, as an eager forward
# pass issues them, at the regimes study's smallest size.
OVERHEAD_N = 1000
OVERHEAD_OPS = ("mul", "add", "tanh", "mul", "mul")


def overhead_chain(torch, n: int = OVERHEAD_N):
    """The eager call of the OVERHEAD_OPS chain on ``n`` bfloat16 elements: five elementwise
    ops, each its own PyTorch call and kernel, intermediates from the caching allocator, the
    last into a preallocated output (the closure holds the buffers)."""
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    y = torch.empty_like(x)

    def call():
        a = torch.mul(x, 1.5)
        a = torch.add(a, 0.5)
        a = torch.tanh(a)
        a = torch.mul(a, x)
        torch.mul(a, 2.5, out=y)

    return call


def captured(torch, fn):
    """``fn`` captured once in a CUDA graph (warmed up on a side stream first, as torch
    asks): the graph's replay, which launches the same kernels from one call."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def per_op_us(per_call_ms: float, ops: int) -> float:
    """Microseconds an op: a call's milliseconds over the ops it issues."""
    if int(ops) < 1:
        raise ValueError(f"a call issues at least one op, not {ops}")
    return per_call_ms * 1e3 / int(ops)


# What every launch-overhead row's method says, and the regimes model checks for
# (kernelbook.report.prediction.HOST_INCLUSIVE): a table measured before (the GPU time of an
# empty kernel) is refused rather than read as the caller's cost.
HOST_WALL_TIME = "host wall time"


def overhead_rows(
    eager_ms: float, graph_ms: float, eager_calls: int, graph_calls: int, ops: int
) -> dict[str, tuple[float, str]]:
    """The device table's launch-overhead rows, {quantity: (µs per op, method)}, from the
    host-timed medians per call of the eager chain of ``ops`` ops and of its graph's replay
    and the calls of their batches."""
    chain = f"{ops} elementwise bfloat16 torch ops ({', '.join(OVERHEAD_OPS)}) at N={OVERHEAD_N}"
    how = f"{HOST_WALL_TIME} per call over back-to-back calls, one sync at the end of a batch"
    return {
        "launch_overhead_us": (
            per_op_us(eager_ms, ops),
            f"a chain of {chain} called eagerly, {how} ({eager_calls} calls a batch), "
            f"median per call / {ops}, warm",
        ),
        "launch_overhead_graph_us": (
            per_op_us(graph_ms, ops),
            f"a chain of {chain} captured in one CUDA graph and replayed, {how} "
            f"({graph_calls} replays a batch), median per replay / {ops}, warm",
        ),
    }


def launch_overhead(timing: dict, stream, torch_stream) -> dict[str, tuple[float, str]]:
    """{quantity: (microseconds, method)}: what an op costs its caller, host included, in the
    overhead regime: a chain of OVERHEAD_OPS tiny elementwise ops called eagerly, and the
    same chain replayed from a CUDA graph, both host-timed (``timing.method: host``: wall
    time per call over back-to-back calls, one synchronisation at the end of each batch,
    warm), sampled alternately; per op = per call / ops. The overhead term of the regimes
    model (kernelbook.report.prediction) multiplies these by a variant's launches.

    It runs before the process attaches CUPTI, as a host-timed study's bench job never
    does: once attached, CUPTI's callbacks stay on every API call, paused records or not
    (an H200 host read about 20 us an eager op so, against about 8 us without)."""
    import torch

    from kernelbook.measure import cupti

    if cupti.attached():
        raise RuntimeError(
            "launch overheads are host time: measure them before this process attaches CUPTI"
        )
    ops = len(OVERHEAD_OPS)
    policy = {**timing, "method": "host", "cache": "warm"}
    host_timer = Timer(policy, 0, stream, torch_stream, kernel_clock=False)
    try:
        eager = overhead_chain(torch)
        graph = captured(torch, eager)
        st = host_timer.measure(
            {"eager": eager, "graph": graph.replay}, f"{ops}-op chain, eager and CUDA graph"
        )
    finally:
        host_timer.close()
    e, g = st["eager"], st["graph"]
    return overhead_rows(e.median, g.median, e.batch_calls, g.batch_calls, ops)

"""The device table: NVML and CUDA facts, theoretical peaks, and measured ceilings."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from kernelbook import gpu, provenance
from kernelbook.launch.kernel import device_sm_count
from kernelbook.measure.bench import memcpy_launcher
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

        for quantity, (us, method) in launch_overhead(project.settings["timing"], timer).items():
            add(quantity, us, "us", "measured", method)

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
    """'CUPTI kernel-time median' or 'blocking-kernel event median (CUPTI ...: why)'."""
    if st.method == "cupti":
        return "CUPTI kernel-time median"
    return "blocking-kernel event median" + (f" ({st.note})" if st.note else "")


def write_device_table(project, out: Path, slot_uuid: str) -> None:
    from kernelbook import tables

    tables.write(
        measure_device(project, slot_uuid, lambda s: print(s, file=sys.stderr)), out, "device"
    )


EMPTY_KERNEL = 'extern "C" __global__ void kb_empty() {}'


def launch_overhead(timing: dict, timer: Timer) -> dict[str, tuple[float, str]]:
    """{quantity: (microseconds, method)}: the GPU time of an empty kernel (one thread), timed
    by the blocking-kernel Timer (no host time in a sample) through a plain launch and as one
    of ``graph_launches`` kernels of a CUDA graph (the graph's time over its kernels). The
    floor of the overhead regime: kernelbook.report.prediction predicts with these."""
    import cupy as cp

    kernel = cp.RawKernel(EMPTY_KERNEL, "kb_empty")

    def empty():
        kernel((1,), (1,), ())

    out = {}
    # events by choice: the GPU's own work around a launch is what this measures, and
    # kernel time leaves it out
    plain = Timer(timer.policy, 0, timer.stream, timer.torch_stream, kernel_clock=False)
    try:
        t = plain.measure({"empty": empty}, "empty kernel, plain launch")["empty"].median
    finally:
        plain.close()
    out["launch_overhead_us"] = (
        t * 1e3,
        "an empty kernel (1 thread) launched once per sample, blocking-kernel event-timed "
        "median, warm",
    )
    launches = int(timing["graph_launches"])
    graph_policy = {**timer.policy, "method": "graph", "cache": "warm", "graph_launches": launches}
    graph_timer = Timer(graph_policy, 0, timer.stream, timer.torch_stream, kernel_clock=False)
    try:
        t = graph_timer.measure({"empty": empty}, "empty kernel, CUDA graph")["empty"].median
    finally:
        graph_timer.close()
    out["launch_overhead_graph_us"] = (
        t * 1e3,
        f"the same empty kernel captured {launches} times in one CUDA graph, the graph's "
        "blocking-kernel event-timed median over its kernels, warm",
    )
    return out

"""Micro-benchmarks of the pipeline's own for the read ceilings: DRAM, L2 and L1.

dram_read: one pass of 16-byte ld.global.cg loads (four in flight a thread) over a buffer
34 times the H200's L2, each thread walking its own grid-stride sequence: what a kernel that
only reads, such as a decode GEMV streaming its weights, can get from HBM. A copy reads and
writes, so its bandwidth is not that ceiling.

l2_read: every thread streams 16-byte loads with ld.global.cg (cached in L2, not in L1)
over a buffer of a quarter of the L2, several passes; after the first pass the buffer is
L2-resident, so bytes loaded over time is the L2-to-SM read bandwidth.
l1_read: each block re-reads its own 16 KiB slice with ld.global.ca (cached in L1) many
times, so after the first pass every load hits L1: the aggregate L1 load bandwidth.
Both keep their sums alive with a store that depends on them, so nothing is optimized out.
"""

from __future__ import annotations

SOURCE = r"""
__device__ __forceinline__ float4 ld_cg(const float4* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float4 ld_ca(const float4* p) {
  float4 v;
  asm volatile("ld.global.ca.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}
extern "C" __global__ void l2_read(const float4* buf, long long n4, int passes, float* sink) {
  float acc = 0.f;
  const long long start = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (int p = 0; p < passes; ++p)
    for (long long i = start; i < n4; i += stride) {
      float4 v = ld_cg(buf + i);
      acc += v.x + v.y + v.z + v.w;
    }
  if (acc == 1234.5f) sink[start] = acc;
}
extern "C" __global__ void dram_read(const float4* buf, long long n4, float* sink) {
  float acc = 0.f;
  const long long start = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = start;
  for (; i + 3 * stride < n4; i += 4 * stride) {  // four independent loads in flight
    float4 a = ld_cg(buf + i), b = ld_cg(buf + i + stride);
    float4 c = ld_cg(buf + i + 2 * stride), d = ld_cg(buf + i + 3 * stride);
    acc += (a.x + a.y + a.z + a.w) + (b.x + b.y + b.z + b.w) + (c.x + c.y + c.z + c.w) +
           (d.x + d.y + d.z + d.w);
  }
  for (; i < n4; i += stride) {
    float4 v = ld_cg(buf + i);
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1234.5f) sink[start] = acc;
}
extern "C" __global__ void l1_read(const float4* buf, int n4_per_block, int passes, float* sink) {
  float acc = 0.f;
  const float4* base = buf + (long long)blockIdx.x * n4_per_block;
  for (int p = 0; p < passes; ++p)
    for (int i = threadIdx.x; i < n4_per_block; i += blockDim.x) {
      float4 v = ld_ca(base + i);
      acc += v.x + v.y + v.z + v.w;
    }
  if (acc == 1234.5f) sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
"""

DRAM_READ_BYTES = 2 * 1024**3
READ_BLOCKS_PER_SM, READ_THREADS = 8, 512  # dram_read's grid: 8 x SMs blocks of 512 threads


def read_launcher(cp, nbytes: int, sms: int, stream_ptr: int):
    """One dram_read pass over ``nbytes`` (a multiple of 16, rounded down) on the stream: the
    bench's same-bytes reference of a study that only reads (bandwidth_reference: read), as
    the copy is of one that reads and writes; the launcher holds its buffers."""
    import numpy as np

    n16 = max(1, int(nbytes) // 16)
    buf = cp.ones(n16 * 4, dtype=cp.float32)
    grid = sms * READ_BLOCKS_PER_SM
    sink = cp.zeros(grid * READ_THREADS, dtype=cp.float32)
    kernel = cp.RawModule(code=SOURCE, options=("-std=c++17",)).get_function("dram_read")
    stream = cp.cuda.ExternalStream(stream_ptr)

    def run():
        kernel((grid,), (READ_THREADS,), (buf, np.int64(n16), sink), stream=stream)

    run.buffers = (buf, sink)
    return run


L1_SLICE_BYTES = 16 * 1024
L2_PASSES = 20
L1_PASSES = 400


def measure(timer, sms: int, l2_bytes: int, seed: int) -> dict[str, tuple[float, str]]:
    """{quantity: (GB/s, method)} for the DRAM, L2 and L1 read ceilings."""
    import cupy as cp
    import numpy as np

    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    l2k, l1k = module.get_function("l2_read"), module.get_function("l1_read")
    rng = cp.random.default_rng(seed)
    sink = cp.zeros(sms * 64 * 1024, dtype=cp.float32)
    out = {}

    dram = read_launcher(cp, DRAM_READ_BYTES, sms, timer.stream.ptr)
    st = timer.measure({"dram": dram}, "DRAM read bandwidth")["dram"]
    out["dram_read_gbps"] = (
        DRAM_READ_BYTES / (st.median * 1e-3) / 1e9,
        f"dram_read: ld.global.cg 16-byte loads, 4 in flight a thread, one pass over "
        f"{DRAM_READ_BYTES} B ({DRAM_READ_BYTES / l2_bytes:.0f}x the L2), grid 8 x SMs x 512 "
        f"threads, bytes read over the {st.method} median",
    )
    del dram  # the launcher holds the buffer
    cp.get_default_memory_pool().free_all_blocks()

    n_bytes = (l2_bytes // 4) // 16 * 16
    buf = rng.standard_normal(n_bytes // 4, dtype=cp.float32)
    grid, block = sms * 8, 512

    def l2():
        l2k((grid,), (block,), (buf, np.int64(n_bytes // 16), np.int32(L2_PASSES), sink))

    st = timer.measure({"l2": l2}, "L2 read bandwidth")["l2"]
    t = st.median
    out["l2_gbps"] = (
        L2_PASSES * n_bytes / (t * 1e-3) / 1e9,
        f"l2_read: ld.global.cg 16-byte loads, {L2_PASSES} passes over {n_bytes} B "
        f"(a quarter of L2), grid 8 x SMs x 512 threads, {st.method} median",
    )
    del buf

    blocks = sms * 4
    buf = rng.standard_normal(blocks * L1_SLICE_BYTES // 4, dtype=cp.float32)

    def l1():
        l1k((blocks,), (256,), (buf, np.int32(L1_SLICE_BYTES // 16), np.int32(L1_PASSES), sink))

    st = timer.measure({"l1": l1}, "L1 read bandwidth")["l1"]
    t = st.median
    out["l1_gbps"] = (
        L1_PASSES * blocks * L1_SLICE_BYTES / (t * 1e-3) / 1e9,
        f"l1_read: ld.global.ca 16-byte loads, each of 4 x SMs blocks re-reads its own "
        f"{L1_SLICE_BYTES} B slice {L1_PASSES} times, {st.method} median",
    )
    return out

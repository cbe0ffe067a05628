"""Exploration, not a study: how fast w4a16's grid reads W when it does nothing else.

Two pure-read kernels over an N x K/2-byte matrix, timed by CUDA events (so each median
includes the ~2.5 us the event pair adds): `frag` reads as the tensor-core steps 04-09 do (a
block a 16-row tile, a lane 16 bytes of rows g and g + 8 a scale group, the block's warps taking
interleaved groups); `contig` reads the same tile 512 contiguous bytes a warp instruction.
UNR groups in flight a lane and MB blocks an SM vary. Run on the GPU host:

    tools/offline/gpu-host.sh python3 tools/explore/w4_read_pattern.py
"""

import cupy as cp

SRC = r"""
// 16 bytes through L2 only, as 09 reads W
__device__ __forceinline__ uint4 ldna(const uint4* p)
{
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// the tensor-core steps' reads: rows g and g + 8 of the block's tile, 16 bytes t of a group
extern "C" __global__ void __launch_bounds__(128, MB)
frag(const uint4* W, int N, int K, unsigned* sink)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int ra = blockIdx.x * 16 + g, rb = ra + 8, groups = K / 128;
  const uint4* wa = W + (size_t)ra * (K / 32) + t;
  const uint4* wb = W + (size_t)rb * (K / 32) + t;
  unsigned acc = 0;
  for (int g0 = warp; g0 < groups; g0 += 4 * UNR) {
    uint4 q[2 * UNR];
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      q[2 * u] = ldna(wa + 4 * (g0 + 4 * u));
      q[2 * u + 1] = ldna(wb + 4 * (g0 + 4 * u));
    }
#pragma unroll
    for (int u = 0; u < 2 * UNR; ++u) acc ^= q[u].x ^ q[u].y ^ q[u].z ^ q[u].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // never in practice: keeps the loads
}

// the same tile, 512 contiguous bytes a warp instruction
extern "C" __global__ void __launch_bounds__(128, MB)
contig(const uint4* W, int N, int K, unsigned* sink)
{
  const uint4* base = W + (size_t)blockIdx.x * 16 * (K / 32);
  const int total = 16 * (K / 32);
  unsigned acc = 0;
  for (int i0 = threadIdx.x; i0 < total; i0 += 128 * 2 * UNR) {
    uint4 q[2 * UNR];
#pragma unroll
    for (int u = 0; u < 2 * UNR; ++u) q[u] = ldna(base + i0 + 128 * u);
#pragma unroll
    for (int u = 0; u < 2 * UNR; ++u) acc ^= q[u].x ^ q[u].y ^ q[u].z ^ q[u].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
"""


def run(N, K, kern, unr, mb, reps=60):
    """Median event time of ``reps`` launches, four buffers in turn (more than L2 holds)."""
    mod = cp.RawModule(code=SRC, options=(f"-DUNR={unr}", f"-DMB={mb}", "-arch=sm_90a"))
    f = mod.get_function(kern)
    nbytes = N * K // 2
    bufs = [cp.random.randint(0, 2**31, size=nbytes // 4, dtype=cp.int32) for _ in range(4)]
    sink = cp.zeros(1, dtype=cp.uint32)
    grid = ((N + 15) // 16,)
    for i in range(8):
        f(grid, (128,), (bufs[i % 4], cp.int32(N), cp.int32(K), sink))
    ts = []
    for i in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        f(grid, (128,), (bufs[i % 4], cp.int32(N), cp.int32(K), sink))
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3)
    ts.sort()
    med = ts[len(ts) // 2]
    where = f"{kern:7s} N={N:6d} K={K} UNR={unr} MB={mb}"
    print(f"{where}: {med:7.1f} us (event), {nbytes / med / 1e3:6.0f} GB/s", flush=True)
    del bufs


for N in (28672, 128256):
    for kern in ("frag", "contig"):
        for unr, mb in ((4, 4), (4, 5), (2, 8), (8, 4)):
            run(N, 4096, kern, unr, mb)

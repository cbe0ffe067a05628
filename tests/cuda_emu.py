"""A small CUDA emulator for the CPU tests: kernel sources compiled by g++ against it run one
OS thread per CUDA thread, blocks one after another, with real barriers and shuffles through
per-warp barriers. Not a GPU (no memory model, no timing, no inline PTX), but every index,
bound, reduction and vector path of the real source runs. A kernel's inline PTX sits in small
helpers that call the emulator's version where KERNELBOOK_EMU is defined: the m16n8k16 BF16
mma (its documented fragment layout) and sub.bf16x2."""

EMU = r"""
#pragma once
#include <array>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <math.h>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static  /* blocks run one at a time: one copy is the block's */
// a driver's input file, whole, in a 256-byte aligned buffer (what cudaMalloc gives); its
// size in *n
inline char* emu_slurp(const char* path, size_t* n) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  *n = f.tellg();
  char* p = (char*)aligned_alloc(256, (*n / 256 + 1) * 256);
  f.seekg(0);
  f.read(p, *n);
  return p;
}
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3 threadIdx;
inline dim3 blockIdx, blockDim;
inline dim3 gridDim;  // set by emu_launch
// a kernel's dynamic shared memory (extern __shared__ on the GPU): one buffer, blocks run one
// at a time; 227 KB, what an H100/H200 block may take
alignas(16) inline unsigned char emu_dynamic_smem[227 * 1024];
struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline std::barrier<>* emu_block;
inline std::vector<std::unique_ptr<std::barrier<>>> emu_warps;
inline std::vector<uint32_t> emu_lanes;
inline void __syncthreads() { emu_block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  emu_warps[(threadIdx.x + threadIdx.y * blockDim.x) / 32]->arrive_and_wait();
}
// lane src's v, for every lane of the calling thread's warp (the warp meets twice)
template <class V> V emu_shfl(V v, int src) {
  const int t = threadIdx.x + threadIdx.y * blockDim.x, w = t / 32;
  std::memcpy(&emu_lanes[t], &v, 4);
  emu_warps[w]->arrive_and_wait();
  V r;
  std::memcpy(&r, &emu_lanes[w * 32 + src % 32], 4);
  emu_warps[w]->arrive_and_wait();
  return r;
}
template <class V> V __shfl_xor_sync(unsigned, V v, int o) {
  return emu_shfl(v, ((threadIdx.x + threadIdx.y * blockDim.x) % 32) ^ o);
}
template <class V> V __shfl_sync(unsigned, V v, int src) { return emu_shfl(v, src); }
// atomics on shared or global memory, and the fences (the threads are OS threads)
template <class V> V atomicAdd(V* p, V v) { return std::atomic_ref<V>(*p).fetch_add(v); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// The warp-wide instructions the kernels reach through a helper that switches on
// KERNELBOOK_EMU: each lane publishes its fragment registers, the warp meets, each lane computes
// its own outputs from everyone's, the warp meets again.
#define KERNELBOOK_EMU 1
inline std::vector<std::array<uint32_t, 6>> emu_frags;
inline float emu_bf16_lane(uint32_t reg, int half) {
  const uint32_t u = ((reg >> (16 * half)) & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t emu_bf16_bits(float f) {  // round to nearest even (exact for the small ints here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d += A B (lane = 4 * group + quad):
// A rows group and group + 8, k 2 quad + {0, 1} (regs a0, a1) and + 8 (a2, a3); B column group,
// k 2 quad + {0, 1} (b0) and + 8 (b1); d rows group and group + 8, columns 2 quad + {0, 1}
inline void emu_mma_m16n8k16_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                  uint32_t a3, uint32_t b0, uint32_t b1) {
  const int t = threadIdx.x + threadIdx.y * blockDim.x, w = t / 32, lane = t % 32;
  emu_frags[t] = {a0, a1, a2, a3, b0, b1};
  emu_warps[w]->arrive_and_wait();
  auto A = [&](int r, int k) {
    const auto& f = emu_frags[w * 32 + (r % 8) * 4 + (k % 8) / 2];
    return emu_bf16_lane(f[(r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2);
  };
  auto B = [&](int k, int c) {
    const auto& f = emu_frags[w * 32 + c * 4 + (k % 8) / 2];
    return emu_bf16_lane(f[4 + (k >= 8 ? 1 : 0)], k % 2);
  };
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int r = lane / 4 + (i >= 2 ? 8 : 0), c = 2 * (lane % 4) + i % 2;
    double s = 0;  // the 16 products exactly, one rounding into the FP32 accumulator
    for (int k = 0; k < 16; ++k) s += (double)A(r, k) * B(k, c);
    out[i] = d[i] + (float)s;
  }
  emu_warps[w]->arrive_and_wait();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}
// sub.rn.bf16x2
inline uint32_t emu_bf16x2_sub(uint32_t a, uint32_t b) {
  return emu_bf16_bits(emu_bf16_lane(a, 0) - emu_bf16_lane(b, 0)) |
         emu_bf16_bits(emu_bf16_lane(a, 1) - emu_bf16_lane(b, 1)) << 16;
}
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t v = (uint64_t)y << 32 | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
// cp.async.bulk.prefetch.L2 (a hint: no data moves): each one kept as (address, bytes), so
// that a driver can check that it lies inside the array it is meant for
inline std::vector<std::pair<const void*, unsigned>> emu_prefetches;
inline std::mutex emu_prefetch_mutex;
inline void emu_l2_prefetch(const void* p, unsigned bytes) {
  std::lock_guard<std::mutex> lock(emu_prefetch_mutex);
  emu_prefetches.emplace_back(p, bytes);
}
template <class V> V __ldg(const V* p) { return *p; }
template <class V> V __ldcs(const V* p) { return *p; }
template <class V> void __stcs(V* p, V v) { *p = v; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int2float_rn(int i) { return (float)i; }
// Run body() once per CUDA thread of every block (a 3-D grid): blocks one after another, a block's
// threads as OS threads sharing its barrier and its warps' shuffle barriers.
template <class F> void emu_launch(dim3 grid, dim3 block, F body) {
  blockDim = block;
  gridDim = grid;
  const int nt = block.x * block.y;
  for (unsigned bz = 0; bz < grid.z; ++bz)
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      blockIdx = {bx, by, bz};
      std::barrier<> bar(nt);
      emu_block = &bar;
      emu_warps.clear();
      for (int w = 0; w < (nt + 31) / 32; ++w) emu_warps.emplace_back(new std::barrier<>(32));
      emu_lanes.assign(nt + 32, 0);
      emu_frags.assign(nt + 32, {});
      std::vector<std::thread> ts;
      for (int t = 0; t < nt; ++t)
        ts.emplace_back([=] {
          threadIdx = {(unsigned)(t % block.x), (unsigned)(t / block.x), 0};
          body();
        });
      for (auto& th : ts) th.join();
    }
}
"""

BF16 = r"""
#pragma once
#include <cstring>
struct __nv_bfloat16 { unsigned short x; };
inline float __bfloat162float(__nv_bfloat16 h) {
  unsigned u = (unsigned)h.x << 16; float f; std::memcpy(&f, &u, 4); return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return {(unsigned short)((u + 0x7fff + ((u >> 16) & 1)) >> 16)};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
"""


def emu_workdir(tmp_path_factory, name: str, driver: str):
    """A fresh folder holding emu.h, the bf16 header and ``driver`` (driver.cpp) for g++;
    the test is skipped where g++ is missing."""
    import shutil

    import pytest

    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    d = tmp_path_factory.mktemp(name)
    (d / "emu.h").write_text(EMU)
    (d / "cuda_bf16.h").write_text(BF16)
    (d / "driver.cpp").write_text(driver)
    return d


def emu_build(emu_dir, v, name=None):
    """``emu_dir``'s driver.cpp (emu_workdir) built by g++ against variant ``v``'s source:
    KFILE and KERNEL, its defines, KERNEL1, KERNEL2, ... for the kernels it launches after
    its own (then:) and WORKSPACE where it takes one. Built once a name (default: v.id); an
    AssertionError with g++'s message if it fails."""
    import subprocess
    from pathlib import Path

    exe = Path(emu_dir) / (name or v.id)
    if exe.exists():
        return exe
    repo = Path(__file__).resolve().parents[1]
    cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-w", f"-I{emu_dir}"]
    cmd += [f'-DKFILE="{repo / v.source}"', f"-DKERNEL={v.entry}"]
    if v.workspace:
        cmd += ["-DWORKSPACE=1"]
    cmd += [f"-DKERNEL{i + 1}={t['entry']}" for i, t in enumerate(v.then)]
    cmd += [f"-D{k}={x}" for k, x in v.defines.items()]
    proc = subprocess.run(
        [*cmd, str(Path(emu_dir) / "driver.cpp"), "-o", str(exe)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe

"""A small CUDA emulator for the CPU tests: kernel sources compiled by g++ against it run one
OS thread per CUDA thread, blocks one after another, with real barriers and shuffles through
per-warp barriers. Not a GPU (no memory model, no timing, no inline PTX), but every index,
bound, reduction and vector path of the real source runs."""

EMU = r"""
#pragma once
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <math.h>
#include <memory>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static  /* blocks run one at a time: one copy is the block's */
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3 threadIdx;
inline dim3 blockIdx, blockDim;
inline dim3 gridDim;  // set by emu_launch
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
template <class V> V __shfl_xor_sync(unsigned, V v, int o) {
  const int t = threadIdx.x + threadIdx.y * blockDim.x, w = t / 32;
  std::memcpy(&emu_lanes[t], &v, 4);
  emu_warps[w]->arrive_and_wait();
  V r;
  std::memcpy(&r, &emu_lanes[w * 32 + ((t % 32) ^ o)], 4);
  emu_warps[w]->arrive_and_wait();
  return r;
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

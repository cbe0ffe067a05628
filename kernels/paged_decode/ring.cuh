// A warp's own cp.async pipeline over pages of the KV cache (04, 05): 16-byte copies global ->
// shared through L2 only, zeros where a copy is masked off, and the commit and wait of the
// copies' groups. Under the tests' CPU emulator (KERNELBOOK_EMU) a copy is a plain synchronous
// copy, so the commit and the wait have nothing to do, and the ring is the emulator's dynamic
// shared memory.
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
#pragma once
#include <cuda_bf16.h>

#ifdef KERNELBOOK_EMU
#include <cstring>
#define RING(name) uint4* name = reinterpret_cast<uint4*>(emu_dynamic_smem)
__device__ __forceinline__ void copy16(uint4* dst, const __nv_bfloat16* src, bool ok)
{
  if (ok) std::memcpy(dst, src, 16);
  else *dst = make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void commit_copies() {}
template <int N>
__device__ __forceinline__ void wait_copies() {}
#else
#define RING(name) extern __shared__ uint4 name[]
// 16 bytes global -> shared (cg: L2 only, each byte is read once), zeros where !ok
__device__ __forceinline__ void copy16(uint4* dst, const __nv_bfloat16* src, bool ok)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
// this thread's copies but the newest N groups have landed
template <int N>
__device__ __forceinline__ void wait_copies()
{
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

// cp.async, 16 bytes at a time: global -> shared through L2 only (cg), zeros where a copy is
// masked off, and the commit and wait of a thread's groups of copies; DYNAMIC_SMEM_U4(name)
// declares the kernel's dynamic shared memory as uint4* name. Under the tests' CPU emulator
// (KERNELBOOK_EMU) a copy is a plain synchronous copy, so the commit and the wait have
// nothing to do, and the dynamic shared memory is the emulator's buffer.
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
#pragma once

#ifdef KERNELBOOK_EMU
#include <cstring>
#define DYNAMIC_SMEM_U4(name) uint4* name = reinterpret_cast<uint4*>(emu_dynamic_smem)
__device__ __forceinline__ void copy16(void* dst, const void* src, bool ok)
{
  if (ok) std::memcpy(dst, src, 16);
  else std::memset(dst, 0, 16);
}
__device__ __forceinline__ void commit_copies() {}
template <int N>
__device__ __forceinline__ void wait_copies() {}
#else
#define DYNAMIC_SMEM_U4(name) extern __shared__ uint4 name[]
// 16 bytes global -> shared (cg: L2 only, for bytes read once), zeros where !ok
__device__ __forceinline__ void copy16(void* dst, const void* src, bool ok)
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

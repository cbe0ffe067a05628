// Bulk copies global -> shared that complete on an mbarrier (cp.async.bulk, the TMA's plain
// form: contiguous bytes, no tensor map), the mbarrier operations a warp-specialized ring
// needs, and a named barrier over some of a block's warps. Each is inline PTX behind a helper;
// under the tests' CPU emulator (KERNELBOOK_EMU, tests/cuda_emu.py, one OS thread a CUDA
// thread) an mbarrier is a phase, a pending-arrival count and a transaction count behind one
// mutex, a bulk copy a memcpy that then completes its bytes, and a named barrier a
// std::barrier of its thread count.
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
#pragma once
#include <stdint.h>

#ifdef KERNELBOOK_EMU
#include <barrier>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

struct EmuMbar {
  uint32_t expected = 0, pending = 0, phase = 0;
  int64_t tx = 0;
};
inline std::map<const void*, EmuMbar> emu_mbars;
inline std::mutex emu_mbar_mutex;
// the phase completes when every arrival and every expected byte is in
inline void emu_mbar_settle(EmuMbar& b)
{
  if (b.pending == 0 && b.tx == 0) {
    b.phase ^= 1u;
    b.pending = b.expected;
  }
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count)
{
  std::lock_guard<std::mutex> lock(emu_mbar_mutex);
  emu_mbars[bar] = EmuMbar{count, count, 0, 0};
}
__device__ __forceinline__ void mbar_init_fence() {}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar)
{
  std::lock_guard<std::mutex> lock(emu_mbar_mutex);
  EmuMbar& b = emu_mbars.at(bar);
  --b.pending;
  emu_mbar_settle(b);
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes)
{
  std::lock_guard<std::mutex> lock(emu_mbar_mutex);
  EmuMbar& b = emu_mbars.at(bar);
  b.tx += bytes;
  --b.pending;
  emu_mbar_settle(b);
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity)
{
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(emu_mbar_mutex);
      if (emu_mbars.at(bar).phase != parity) return;  // the phase of that parity is over
    }
    std::this_thread::yield();
  }
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar)
{
  std::memcpy(dst, src, bytes);
  std::lock_guard<std::mutex> lock(emu_mbar_mutex);
  EmuMbar& b = emu_mbars.at(bar);
  b.tx -= bytes;
  emu_mbar_settle(b);
}
template <int THREADS>
__device__ __forceinline__ void named_sync(int)
{
  static std::barrier<> b(THREADS);
  b.arrive_and_wait();
}
#else
__device__ __forceinline__ uint32_t smem_addr(const void* p)
{
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
// the initialised barriers made visible to the async proxy (before the block's barrier)
__device__ __forceinline__ void mbar_init_fence()
{
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar)
{
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes)
{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
// until the barrier's phase of this parity has completed
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity)
{
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory by
// the TMA unit, counted against `bar`'s expected transaction bytes when they land
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar)
{
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
// barrier `id` (1-15; 0 is __syncthreads') over THREADS threads, whole warps
template <int THREADS>
__device__ __forceinline__ void named_sync(int id)
{
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(THREADS) : "memory");
}
#endif

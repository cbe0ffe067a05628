// A warp's own cp.async pipeline over pages of the KV cache (04, 05): the ring of stages a warp
// streams its pages through (PageRing; after paged.cuh, whose P it uses), in the kernel's
// dynamic shared memory, filled by common/cp_async.cuh's 16-byte copies.
// Included with quotes, so a kernel's source hash covers it (kernelbook.provenance).
#pragma once
#include <cuda_bf16.h>

#include "../common/cp_async.cuh"

#ifndef NS
#define NS 3  // pages a warp's ring holds
#endif
#define CHUNKS (2 * P * D / 8)  // 16-byte chunks of a page's keys and values: 512

// A warp's pages first, first + step, ... (up to token t1; P tokens a page, paged.cuh) through
// NS_ stages of STAGE_ 16-byte chunks at `base`: the constructor starts the first NS_ - 1
// copies; current() starts the copy NS_ - 1 pages ahead (its block-table entry loaded a page
// earlier still, so its latency hides under a page's math), waits for the current page's and
// returns its stage; release() after every lane has read it. copy(stage, page, valid) is the
// kernel's own copy of a page (its layout, its swizzle). A group is committed even where there
// is nothing to copy, so that wait_copies<NS_ - 1> always means the current page.
template <int NS_, int STAGE_, class Copy>
struct PageRing {
  uint4* base;
  const int* row;  // the sequence's block table
  int t1, step, next, next_page, fill = NS_ - 1, stage = 0;
  Copy copy;

  __device__ __forceinline__ PageRing(uint4* base_, const int* row_, int first, int t1_,
                                      int step_, Copy copy_)
      : base(base_), row(row_), t1(t1_), step(step_), copy(copy_)
  {
#pragma unroll
    for (int s = 0; s < NS_ - 1; ++s) {
      const int pg = first + s * step;
      if (pg * P < t1) copy(base + s * STAGE_, row[pg], min(P, t1 - pg * P));
      commit_copies();
    }
    next = first + (NS_ - 1) * step;
    next_page = next * P < t1 ? row[next] : 0;
  }

  __device__ __forceinline__ const uint4* current()
  {
    if (next * P < t1) copy(base + fill * STAGE_, next_page, min(P, t1 - next * P));
    commit_copies();
    next += step;
    next_page = next * P < t1 ? row[next] : 0;
    fill = fill == NS_ - 1 ? 0 : fill + 1;
    wait_copies<NS_ - 1>();  // this lane's copies of the current page have landed
    __syncwarp();            // and every lane's
    return base + stage * STAGE_;
  }

  __device__ __forceinline__ void release()
  {
    __syncwarp();  // every lane has read the stage before it is copied into again
    stage = stage == NS_ - 1 ? 0 : stage + 1;
  }

  __device__ __forceinline__ void finish() { wait_copies<0>(); }  // the groups left are empty
};

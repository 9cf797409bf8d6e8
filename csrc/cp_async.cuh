// cp.async (sm_80+): 16-byte global -> shared copies that do not stall the issuing thread, in
// commit groups waited on by count. Plain loads and stores on older devices.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace vgraph {

// 16-byte global -> shared copy; zero-fills when !valid (no bytes are read then).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid = true) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
#else
  *reinterpret_cast<uint4*>(smem) =
      valid ? *reinterpret_cast<const uint4*>(gmem) : make_uint4(0, 0, 0, 0);
#endif
}

// 16-byte global -> shared copy with an L2 cache policy (createpolicy; sm_80+).
__device__ __forceinline__ void cp_async16_hint(void* smem, const void* gmem, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(gmem), "l"(policy));
#else
  *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// A compiler barrier: no memory access moves across it. The asm statements above carry no memory
// clobber, so a thread reading its own cp.async slots (no __syncthreads between) puts one after
// the wait, before the slots' reads, and one before their refill, after the last reads.
__device__ __forceinline__ void compiler_fence() { asm volatile("" ::: "memory"); }

}  // namespace vgraph

// The greedy tokens' ordering key, shared by the looping GEMV's greedy epilogue (decode_gemv.cuh)
// and the argmax kernel's atomic finish (sampling_cuda.cu). Device code only.
#pragma once

#include <cstdint>

namespace vgraph {

// A value and its index as one integer that orders like torch.argmax: NaN above every number, -0
// equal to +0, and among equal values the lowest index first (the index enters inverted), so a
// row's greedy index is its largest key's (greedy_index); 0 is below every key (nothing yet).
__device__ __forceinline__ unsigned long long greedy_key(float v, int index) {
  const uint32_t b = __float_as_uint(v == 0.f ? 0.f : v);
  const uint32_t ordered = isnan(v) ? 0xffffffffu : (b & 0x80000000u) ? ~b : b | 0x80000000u;
  return static_cast<unsigned long long>(ordered) << 32 |
         (0xffffffffu - static_cast<uint32_t>(index));
}

__device__ __forceinline__ int64_t greedy_index(unsigned long long key) {
  return static_cast<int64_t>(0xffffffffu - static_cast<uint32_t>(key));
}

}  // namespace vgraph

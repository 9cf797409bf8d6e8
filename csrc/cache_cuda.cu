// reshape_and_cache on CUDA: one CTA per token copies its K and V rows into the token's cache slot
// with 16-byte vectors when the layout allows. Slot -1 (pad token) is skipped. The grid is
// num_tokens, so a captured graph stays valid when slot_mapping changes.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cache.h"
#include "common.h"

namespace vgraph {
namespace {

constexpr int kCacheThreads = 128;

// VEC elements per copy (16 bytes when aligned, else 1).
template <typename scalar_t, int VEC>
__global__ void __launch_bounds__(kCacheThreads) reshape_and_cache_kernel(
    const scalar_t* __restrict__ key,    // [num_tokens, num_kv_heads, head_dim] (strided)
    const scalar_t* __restrict__ value,  // [num_tokens, num_kv_heads, head_dim] (strided)
    scalar_t* __restrict__ key_cache,    // [num_blocks, block_size, num_kv_heads, head_dim]
    scalar_t* __restrict__ value_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
    const int64_t* __restrict__ slot_mapping,  // [num_tokens]
    int num_kv_heads, int head_dim, int64_t key_tok_stride, int64_t key_head_stride,
    int64_t value_tok_stride, int64_t value_head_stride) {
  using vec_t = typename std::conditional<VEC == 1, scalar_t, uint4>::type;
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  const int row = num_kv_heads * head_dim;
  // The cache is contiguous: slot s starts at element s * num_kv_heads * head_dim.
  const int64_t dst = slot * row;
  for (int i = threadIdx.x * VEC; i < row; i += kCacheThreads * VEC) {
    const int h = i / head_dim;
    const int d = i - h * head_dim;
    const scalar_t* k = key + t * key_tok_stride + h * key_head_stride + d;
    const scalar_t* v = value + t * value_tok_stride + h * value_head_stride + d;
    *reinterpret_cast<vec_t*>(key_cache + dst + i) = *reinterpret_cast<const vec_t*>(k);
    *reinterpret_cast<vec_t*>(value_cache + dst + i) = *reinterpret_cast<const vec_t*>(v);
  }
}

bool aligned16(const at::Tensor& t, int vec) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(0) % vec == 0 &&
         t.stride(1) % vec == 0;
}

}  // namespace

void reshape_and_cache_cuda(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                            at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  check_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping);
  const int64_t num_tokens = key.size(0);
  if (num_tokens == 0) return;
  const c10::cuda::CUDAGuard guard(key.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int num_kv_heads = static_cast<int>(key.size(1));
  const int head_dim = static_cast<int>(key.size(2));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, key.scalar_type(), "reshape_and_cache_cuda", [&] {
    constexpr int kVec = 16 / sizeof(scalar_t);
    const bool vectorized = head_dim % kVec == 0 && aligned16(key, kVec) &&
                            aligned16(value, kVec) &&
                            reinterpret_cast<uintptr_t>(key_cache.data_ptr()) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(value_cache.data_ptr()) % 16 == 0;
    auto launch = [&](auto kernel) {
      kernel<<<num_tokens, kCacheThreads, 0, stream>>>(
          key.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(), key_cache.data_ptr<scalar_t>(),
          value_cache.data_ptr<scalar_t>(), slot_mapping.data_ptr<int64_t>(), num_kv_heads,
          head_dim, key.stride(0), key.stride(1), value.stride(0), value.stride(1));
    };
    if (vectorized) {
      launch(reshape_and_cache_kernel<scalar_t, kVec>);
    } else {
      launch(reshape_and_cache_kernel<scalar_t, 1>);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CUDA, m) {
  m.impl("reshape_and_cache", &vgraph::reshape_and_cache_cuda);
}

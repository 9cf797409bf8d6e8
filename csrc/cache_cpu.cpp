// reshape_and_cache on the CPU: copy each token's K/V rows into its cache slot. Slot -1 (a pad
// token) is skipped. Reference: vgraph/attention/ops_ref.py::reshape_and_cache_ref.
#include <cstring>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "cache.h"
#include "common.h"

namespace vgraph {
namespace {

template <typename scalar_t>
void copy_rows(const at::Tensor& src, scalar_t* dst_cache, const int64_t* slots,
               int64_t num_tokens, int64_t num_slots) {
  const int64_t num_kv_heads = src.size(1);
  const int64_t head_dim = src.size(2);
  const int64_t row = num_kv_heads * head_dim;  // elements of one slot
  const scalar_t* src_ptr = src.data_ptr<scalar_t>();
  const int64_t tok_stride = src.stride(0);
  const int64_t head_stride = src.stride(1);
  at::parallel_for(0, num_tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      TORCH_CHECK(slot < num_slots, "slot ", slot, " of token ", t, " is outside the cache (",
                  num_slots, " slots)");
      // The cache is contiguous, so slot s starts at element s * num_kv_heads * head_dim.
      scalar_t* dst = dst_cache + slot * row;
      const scalar_t* s = src_ptr + t * tok_stride;
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        std::memcpy(dst + h * head_dim, s + h * head_stride, head_dim * sizeof(scalar_t));
      }
    }
  });
}

}  // namespace

void reshape_and_cache_cpu(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                           at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  check_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping);
  const int64_t num_tokens = key.size(0);
  const int64_t num_slots = key_cache.size(0) * key_cache.size(1);
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, key.scalar_type(), "reshape_and_cache_cpu", [&] {
    copy_rows<scalar_t>(key, key_cache.data_ptr<scalar_t>(), slots, num_tokens, num_slots);
    copy_rows<scalar_t>(value, value_cache.data_ptr<scalar_t>(), slots, num_tokens, num_slots);
  });
}

}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CPU, m) { m.impl("reshape_and_cache", &vgraph::reshape_and_cache_cpu); }

// reshape_and_cache's host entry points, for the ops that write the cache as part of their work
// (paged_attention's append). Definitions: cache_cpu.cpp, cache_cuda.cu.
#pragma once

#include <ATen/core/Tensor.h>

namespace vgraph {

void reshape_and_cache_cpu(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                           at::Tensor& value_cache, const at::Tensor& slot_mapping);

void reshape_and_cache_cuda(const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                            at::Tensor& value_cache, const at::Tensor& slot_mapping);

}  // namespace vgraph

// Host entry points of the layer ops (layers_cpu.cpp / layers_cuda.cu) for other ops of vgraph_C:
// the fused decode ops (decode_*.cpp/.cu) run them on their unfused path. Same arguments and
// checks as the registered ops. CudaOps' exist only in a CUDA build.
#pragma once

#include <ATen/core/Tensor.h>

namespace vgraph {

struct CpuOps {
  static void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight,
                       double eps);
  static void rotary_embedding(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                               int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox);
  static void silu_and_mul(at::Tensor& out, const at::Tensor& input);
};

struct CudaOps {
  static void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight,
                       double eps);
  static void rotary_embedding(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                               int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox);
  static void silu_and_mul(at::Tensor& out, const at::Tensor& input);
};

}  // namespace vgraph

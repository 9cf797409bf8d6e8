// Host entry points of the layer ops (layers_cpu.cpp / layers_cuda.cu) for other ops of vgraph_C:
// the fused decode ops (decode_*.cpp/.cu) run them on their unfused path. Same arguments and
// checks as the registered ops. CudaOps' exist only in a CUDA build.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

namespace vgraph {

struct CpuOps {
  static void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight,
                       double eps);
  static void rotary_embedding(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                               int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox);
  static void silu_and_mul(at::Tensor& out, const at::Tensor& input);
  // qkv [T, N] holds hidden [T, K] W^T for a W that carries its norm's weight
  // (rms_norm_qkv_rope's unit_norm): each row is multiplied by its hidden row's 1 / rms, the bias
  // added and neox RoPE applied to the first num_heads + num_kv_heads heads when positions are
  // given; float32 math, rounded once. Arguments checked by the caller.
  static void rms_scale_rope(at::Tensor& qkv, const at::Tensor& hidden, double eps,
                             const std::optional<at::Tensor>& bias,
                             const std::optional<at::Tensor>& positions,
                             const std::optional<at::Tensor>& cos_sin_cache, int64_t head_size,
                             int64_t num_heads, int64_t num_kv_heads);
};

struct CudaOps {
  static void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight,
                       double eps);
  static void rotary_embedding(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                               int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox);
  static void silu_and_mul(at::Tensor& out, const at::Tensor& input);
  static void rms_scale_rope(at::Tensor& qkv, const at::Tensor& hidden, double eps,
                             const std::optional<at::Tensor>& bias,
                             const std::optional<at::Tensor>& positions,
                             const std::optional<at::Tensor>& cos_sin_cache, int64_t head_size,
                             int64_t num_heads, int64_t num_kv_heads);
};

}  // namespace vgraph

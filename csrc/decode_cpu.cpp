// The fused decode ops on the CPU: their unfused path (decode_common.h) over the CPU layer ops and
// at::mm, so CI runs the model code that calls them. The CUDA twin (decode_cuda.cu) computes the
// same function with GEMV kernels for small token counts.
#include <optional>

#include <torch/library.h>

#include "decode_common.h"
#include "layers.h"

namespace vgraph {
namespace {

using CpuPath = Unfused<CpuOps>;

// The greedy tokens of the head ops: torch.argmax of what they wrote.
void write_greedy(const std::optional<at::Tensor>& greedy, const at::Tensor& out) {
  if (greedy && out.size(0) > 0) {
    at::Tensor g = *greedy;
    at::argmax_out(g, out, 1);
  }
}

void linear_out_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight,
                    std::optional<int64_t> /*max_gemv_tokens*/,
                    const std::optional<at::Tensor>& greedy,
                    const std::optional<at::Tensor>& greedy_state) {
  check_linear_out(out, x, weight);
  check_greedy(greedy, greedy_state, out);
  CpuPath::linear_out(out, x, weight);
  write_greedy(greedy, out);
}

void rms_norm_linear_out_cpu(at::Tensor& out, const at::Tensor& hidden,
                             const at::Tensor& norm_weight, double eps, const at::Tensor& weight,
                             std::optional<int64_t> /*max_gemv_tokens*/,
                             const std::optional<at::Tensor>& greedy,
                             const std::optional<at::Tensor>& greedy_state) {
  check_rms_norm_linear_out(out, hidden, norm_weight, weight);
  check_greedy(greedy, greedy_state, out);
  CpuPath::rms_norm_linear_out(out, hidden, norm_weight, eps, weight);
  write_greedy(greedy, out);
}

void linear_add_residual_cpu(at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
                             std::optional<int64_t> /*max_gemv_tokens*/) {
  check_linear_add_residual(residual, x, weight);
  CpuPath::linear_add_residual(residual, x, weight);
}

void rms_norm_qkv_rope_cpu(at::Tensor& qkv, const at::Tensor& hidden,
                           const at::Tensor& norm_weight, double eps, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias,
                           const std::optional<at::Tensor>& positions,
                           const std::optional<at::Tensor>& cos_sin_cache, int64_t head_size,
                           int64_t num_heads, int64_t num_kv_heads,
                           std::optional<int64_t> /*max_gemv_tokens*/, bool unit_norm,
                           const std::optional<at::Tensor>& /*wide_packed: CUDA's*/) {
  check_rms_norm_qkv_rope(qkv, hidden, norm_weight, weight, bias, positions, cos_sin_cache,
                          head_size, num_heads, num_kv_heads);
  CpuPath::rms_norm_qkv_rope(qkv, hidden, norm_weight, eps, weight, bias, positions,
                             cos_sin_cache, head_size, num_heads, num_kv_heads, unit_norm);
}

void rms_norm_gate_up_silu_cpu(at::Tensor& out, const at::Tensor& hidden,
                               const at::Tensor& norm_weight, double eps, const at::Tensor& weight,
                               std::optional<int64_t> /*max_gemv_tokens*/,
                               const std::optional<at::Tensor>& /*wide_packed: CUDA's*/) {
  check_rms_norm_gate_up_silu(out, hidden, norm_weight, weight);
  CpuPath::rms_norm_gate_up_silu(out, hidden, norm_weight, eps, weight);
}

void rms_norm_mlp_residual_cpu(at::Tensor& residual, const at::Tensor& norm_weight, double eps,
                               const at::Tensor& gate_up, const at::Tensor& down,
                               const std::optional<at::Tensor>& state,
                               const std::optional<at::Tensor>& /*wide_packed: CUDA's*/,
                               std::optional<int64_t> /*max_fused_tokens*/) {
  check_rms_norm_mlp_residual(residual, norm_weight, gate_up, down, state);
  CpuPath::rms_norm_mlp_residual(residual, norm_weight, eps, gate_up, down);
}

int64_t fused_mlp_tokens_cpu(const at::Tensor& /*gate_up*/) {
  return 0;  // the one-kernel MLP is CUDA's
}

int64_t wide_gemv_from_cpu(const at::Tensor& /*weight*/, c10::string_view /*epilogue*/,
                           int64_t /*head_size*/) {
  return 0;  // the wide kernel is CUDA's (sm_90)
}

}  // namespace
}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CPU, m) {
  m.impl("linear_out", &vgraph::linear_out_cpu);
  m.impl("rms_norm_linear_out", &vgraph::rms_norm_linear_out_cpu);
  m.impl("linear_add_residual", &vgraph::linear_add_residual_cpu);
  m.impl("rms_norm_qkv_rope", &vgraph::rms_norm_qkv_rope_cpu);
  m.impl("rms_norm_gate_up_silu", &vgraph::rms_norm_gate_up_silu_cpu);
  m.impl("wide_gemv_from", &vgraph::wide_gemv_from_cpu);
  m.impl("rms_norm_mlp_residual", &vgraph::rms_norm_mlp_residual_cpu);
  m.impl("fused_mlp_tokens", &vgraph::fused_mlp_tokens_cpu);
}

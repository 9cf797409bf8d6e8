// The fused decode ops (linear_out, rms_norm_linear_out, linear_add_residual, rms_norm_qkv_rope,
// rms_norm_gate_up_silu, rms_norm_mlp_residual): argument checks shared by the CPU and CUDA
// impls, and their unfused path (norm kernel, library GEMM, rope / silu kernel), which the CPU
// always takes and CUDA takes above the GEMV token threshold. Host code only.
#pragma once

#include <optional>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "layers_common.h"

namespace vgraph {
// Internal linkage: this header is compiled by both the host compiler and nvcc, which must not
// share (merge) one copy of these functions.
namespace {

// A [num_tokens, K] activation: rows may be strided, last dim contiguous; a 16-bit or float32 dtype.
void check_activation(const at::Tensor& x, const char* name) {
  check_float_dtype(x, name);
  check_rows(x, name, x);
}

// weight [N, K] contiguous, same dtype and device as x [M, K].
void check_weight(const at::Tensor& weight, const at::Tensor& x, int64_t n) {
  TORCH_CHECK(weight.dim() == 2 && weight.size(1) == x.size(1) && (n < 0 || weight.size(0) == n),
              "weight must be [", n < 0 ? std::string("N") : std::to_string(n), ", K = ", x.size(1),
              "], got ", weight.sizes());
  TORCH_CHECK(weight.is_contiguous(), "weight must be contiguous");
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "weight dtype ", weight.scalar_type(),
              " != input dtype ", x.scalar_type());
  TORCH_CHECK(weight.device() == x.device(), "weight is on ", weight.device(), ", expected ",
              x.device());
}

// out [M, N]: x's dtype, or float32 (logits; rounded to x's dtype first).
void check_linear_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  check_activation(x, "x");
  check_weight(weight, x, -1);
  TORCH_CHECK(out.dim() == 2 && out.size(0) == x.size(0) && out.size(1) == weight.size(0),
              "out must be [", x.size(0), ", ", weight.size(0), "], got ", out.sizes());
  TORCH_CHECK(out.scalar_type() == x.scalar_type() || out.scalar_type() == at::kFloat,
              "out dtype must be ", x.scalar_type(), " or float32, got ", out.scalar_type());
  TORCH_CHECK(out.size(1) == 0 || out.stride(1) == 1, "out must have a contiguous last dim");
  TORCH_CHECK(out.device() == x.device(), "out is on ", out.device(), ", expected ", x.device());
}

// The LM head ops' greedy tokens: greedy int64 [num_tokens]; greedy_state (the CUDA kernels'
// zeroed scratch, kGreedyStateSize int64: required on CUDA, ignored on the CPU): a pair (a key,
// then a CTA count) for each of up to kGreedyStateSize / 2 rows: the looping GEMV's at one token
// (GemvArgs::greedy_state), the argmax kernel's atomic finish (argmax.h) for as many rows.
constexpr int64_t kGreedyStateSize = 128;
void check_greedy(const std::optional<at::Tensor>& greedy,
                  const std::optional<at::Tensor>& greedy_state, const at::Tensor& out) {
  if (!greedy) {
    TORCH_CHECK(!greedy_state, "greedy_state is given without greedy");
    return;
  }
  TORCH_CHECK(greedy->dim() == 1 && greedy->size(0) == out.size(0) &&
                  greedy->scalar_type() == at::kLong && greedy->is_contiguous() &&
                  greedy->device() == out.device(),
              "greedy must be a contiguous int64 [", out.size(0), "] on ", out.device(), ", got ",
              greedy->scalar_type(), " ", greedy->sizes(), " on ", greedy->device());
  TORCH_CHECK(out.size(0) == 0 || out.size(1) > 0, "greedy needs a vocabulary of at least 1");
  if (out.is_cuda()) {
    TORCH_CHECK(greedy_state, "greedy_state is required with greedy on CUDA");
  }
  if (greedy_state) {
    TORCH_CHECK(greedy_state->dim() == 1 && greedy_state->size(0) >= kGreedyStateSize &&
                    greedy_state->scalar_type() == at::kLong &&
                    greedy_state->is_contiguous() && greedy_state->device() == out.device(),
                "greedy_state must be a contiguous int64 [>= ", kGreedyStateSize, "] on ",
                out.device(), ", got ", greedy_state->scalar_type(), " ",
                greedy_state->sizes(), " on ", greedy_state->device());
  }
}

void check_linear_add_residual(const at::Tensor& residual, const at::Tensor& x,
                                      const at::Tensor& weight) {
  check_activation(x, "x");
  check_weight(weight, x, -1);
  check_rows(residual, "residual", x);
  TORCH_CHECK(residual.size(0) == x.size(0) && residual.size(1) == weight.size(0),
              "residual must be [", x.size(0), ", ", weight.size(0), "], got ", residual.sizes());
}

// hidden [M, K] normalized by norm_weight [K] before the projection.
void check_norm_prologue(const at::Tensor& hidden, const at::Tensor& norm_weight) {
  check_activation(hidden, "hidden");
  TORCH_CHECK(hidden.size(1) > 0, "hidden size must be > 0");
  check_norm_weight(norm_weight, hidden);
}

void check_rms_norm_linear_out(const at::Tensor& out, const at::Tensor& hidden,
                               const at::Tensor& norm_weight, const at::Tensor& weight) {
  check_norm_prologue(hidden, norm_weight);
  check_linear_out(out, hidden, weight);
}

void check_rms_norm_qkv_rope(const at::Tensor& qkv, const at::Tensor& hidden,
                                    const at::Tensor& norm_weight, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    const std::optional<at::Tensor>& positions,
                                    const std::optional<at::Tensor>& cos_sin_cache,
                                    int64_t head_size, int64_t num_heads, int64_t num_kv_heads) {
  check_norm_prologue(hidden, norm_weight);
  TORCH_CHECK(head_size > 0 && head_size % 2 == 0, "head_size must be even and > 0, got ",
              head_size);
  TORCH_CHECK(num_heads > 0 && num_kv_heads > 0, "num_heads / num_kv_heads must be > 0, got ",
              num_heads, " / ", num_kv_heads);
  const int64_t n = (num_heads + 2 * num_kv_heads) * head_size;
  check_weight(weight, hidden, n);
  check_rows(qkv, "qkv", hidden);
  TORCH_CHECK(qkv.size(0) == hidden.size(0) && qkv.size(1) == n, "qkv must be [", hidden.size(0),
              ", ", n, "], got ", qkv.sizes());
  if (bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n && bias->is_contiguous(),
                "bias must be contiguous [", n, "], got ", bias->sizes());
    TORCH_CHECK(bias->scalar_type() == hidden.scalar_type() && bias->device() == hidden.device(),
                "bias must have hidden's dtype and device");
  }
  TORCH_CHECK(positions.has_value() == cos_sin_cache.has_value(),
              "positions and cos_sin_cache come together (both or neither)");
  if (cos_sin_cache) {
    TORCH_CHECK(cos_sin_cache->dim() == 2 && cos_sin_cache->size(1) == head_size,
                "cos_sin_cache must be [max_position, head_size = ", head_size,
                "] (rotary over the whole head), got ", cos_sin_cache->sizes());
    const at::Tensor q = qkv.narrow(1, 0, num_heads * head_size);
    const at::Tensor k = qkv.narrow(1, num_heads * head_size, num_kv_heads * head_size);
    check_rotary_embedding(*positions, q, k, head_size, *cos_sin_cache, true);
  }
}

void check_rms_norm_gate_up_silu(const at::Tensor& out, const at::Tensor& hidden,
                                        const at::Tensor& norm_weight, const at::Tensor& weight) {
  check_norm_prologue(hidden, norm_weight);
  check_weight(weight, hidden, -1);
  TORCH_CHECK(weight.size(0) % 2 == 0, "weight rows ", weight.size(0),
              " must be even (gate rows, then up rows)");
  check_rows(out, "out", hidden);
  TORCH_CHECK(out.size(0) == hidden.size(0) && out.size(1) == weight.size(0) / 2, "out must be [",
              hidden.size(0), ", ", weight.size(0) / 2, "], got ", out.sizes());
}

// Whether a pointer allows 16-byte vector loads (the CUDA kernels' precondition).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The one-kernel MLP's scratch (csrc/decode_mlp.cu), in int64 words: the I activations of a
// 16-bit dtype, then the barrier's count and generation words.
inline int64_t mlp_state_words(int64_t inter) { return (inter + 3) / 4 + 2; }

// residual [M, H] += silu_and_mul(rms_norm(residual) W_gu^T) W_d^T: gate_up [2 I, H] (gate rows,
// then up rows) and down [H, I] contiguous, residual's dtype and device; state (optional: the
// CUDA kernel's scratch) int64 [>= mlp_state_words(I)], zeroed once.
void check_rms_norm_mlp_residual(const at::Tensor& residual, const at::Tensor& norm_weight,
                                 const at::Tensor& gate_up, const at::Tensor& down,
                                 const std::optional<at::Tensor>& state) {
  check_norm_prologue(residual, norm_weight);
  check_weight(gate_up, residual, -1);
  TORCH_CHECK(gate_up.size(0) % 2 == 0, "gate_up_weight rows ", gate_up.size(0),
              " must be even (gate rows, then up rows)");
  const int64_t inter = gate_up.size(0) / 2, h = residual.size(1);
  TORCH_CHECK(down.dim() == 2 && down.size(0) == h && down.size(1) == inter,
              "down_weight must be [H = ", h, ", I = ", inter, "], got ", down.sizes());
  TORCH_CHECK(down.is_contiguous(), "down_weight must be contiguous");
  TORCH_CHECK(down.scalar_type() == residual.scalar_type() && down.device() == residual.device(),
              "down_weight must have residual's dtype and device");
  if (state) {
    const int64_t words = mlp_state_words(inter);
    TORCH_CHECK(state->dim() == 1 && state->scalar_type() == at::kLong &&
                    state->is_contiguous() && state->size(0) >= words &&
                    state->device() == residual.device(),
                "state must be contiguous int64 [>= (I + 3) / 4 + 2 = ", words, "] on ",
                residual.device(), ", got ", state->scalar_type(), " ", state->sizes(), " on ",
                state->device());
  }
}

// The unfused path: the device's layer ops around at::mm. Ops is CpuOps or CudaOps (layers.h).
template <typename Ops>
struct Unfused {
  static void linear_out(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
    if (out.scalar_type() == x.scalar_type()) {
      at::mm_out(out, x, weight.t());
    } else {
      out.copy_(at::mm(x, weight.t()));  // rounded to x's dtype, then widened
    }
  }

  static void linear_add_residual(at::Tensor& residual, const at::Tensor& x,
                                  const at::Tensor& weight) {
    // one GEMM with the residual as its accumulator (beta = 1): no separate add launch
    residual.addmm_(x, weight.t());
  }

  static at::Tensor norm(const at::Tensor& hidden, const at::Tensor& norm_weight, double eps) {
    at::Tensor normed = at::empty(hidden.sizes(), hidden.options());  // [M, K]
    Ops::rms_norm(normed, hidden, norm_weight, eps);
    return normed;
  }

  static void rms_norm_linear_out(at::Tensor& out, const at::Tensor& hidden,
                                  const at::Tensor& norm_weight, double eps,
                                  const at::Tensor& weight) {
    linear_out(out, norm(hidden, norm_weight, eps), weight);
  }

  // unit_norm (norm_weight is ones, its values folded into weight): for bfloat16 and float32 the
  // GEMM takes hidden as it is and one kernel scales each row of its output by the row's
  // 1 / rms, adds the bias and rotates (Ops::rms_scale_rope), where the norm had a kernel of its
  // own before the GEMM. float16 keeps the norm first: un-normalized products may pass its range.
  static void rms_norm_qkv_rope(at::Tensor& qkv, const at::Tensor& hidden,
                                const at::Tensor& norm_weight, double eps,
                                const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                const std::optional<at::Tensor>& positions,
                                const std::optional<at::Tensor>& cos_sin_cache, int64_t head_size,
                                int64_t num_heads, int64_t num_kv_heads, bool unit_norm) {
    if (unit_norm && hidden.scalar_type() != at::kHalf) {
      at::mm_out(qkv, hidden, weight.t());
      Ops::rms_scale_rope(qkv, hidden, eps, bias, positions, cos_sin_cache, head_size, num_heads,
                          num_kv_heads);
      return;
    }
    const at::Tensor normed = norm(hidden, norm_weight, eps);
    if (bias) {
      at::addmm_out(qkv, *bias, normed, weight.t());
    } else {
      at::mm_out(qkv, normed, weight.t());
    }
    if (positions) {
      at::Tensor q = qkv.narrow(1, 0, num_heads * head_size);
      at::Tensor k = qkv.narrow(1, num_heads * head_size, num_kv_heads * head_size);
      Ops::rotary_embedding(*positions, q, k, head_size, *cos_sin_cache, true);
    }
  }

  static void rms_norm_gate_up_silu(at::Tensor& out, const at::Tensor& hidden,
                                    const at::Tensor& norm_weight, double eps,
                                    const at::Tensor& weight) {
    const at::Tensor gate_up = at::mm(norm(hidden, norm_weight, eps), weight.t());  // [M, 2I]
    Ops::silu_and_mul(out, gate_up);
  }

  static void rms_norm_mlp_residual(at::Tensor& residual, const at::Tensor& norm_weight,
                                    double eps, const at::Tensor& gate_up,
                                    const at::Tensor& down) {
    at::Tensor act = at::empty({residual.size(0), down.size(1)}, residual.options());  // [M, I]
    rms_norm_gate_up_silu(act, residual, norm_weight, eps, gate_up);
    linear_add_residual(residual, act, down);
  }
};

}  // namespace
}  // namespace vgraph

// The fused layer ops on the CPU: rms_norm, fused_add_rms_norm, rotary_embedding, silu_and_mul,
// embedding; and rms_scale_rope, the unit-norm path of rms_norm_qkv_rope (layers.h; no op of its
// own).
// Plain loops over tokens (at::parallel_for), float32 math, rounded to the tensor dtype at the same
// points as the torch code they replace (vgraph/layers/{layernorm,rotary,linear}.py), so the CUDA
// kernels in layers_cuda.cu have a readable twin. The engine's CPU path keeps the torch code; these
// exist for tests and for parity of semantics.
#include <cmath>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "layers.h"
#include "layers_common.h"

namespace vgraph {
namespace {

template <typename scalar_t>
inline scalar_t round_to(float v) {
  return static_cast<scalar_t>(v);
}

// out_row = weight * (x * rsqrt(mean(x^2) + eps)).to(dtype), x given as float32.
template <typename scalar_t>
void norm_row(const float* x, int64_t hidden, const scalar_t* weight, float eps, scalar_t* out) {
  float sum_sq = 0.f;
  for (int64_t i = 0; i < hidden; ++i) sum_sq += x[i] * x[i];
  const float inv_rms = 1.f / std::sqrt(sum_sq / static_cast<float>(hidden) + eps);
  for (int64_t i = 0; i < hidden; ++i) {
    const float y = static_cast<float>(round_to<scalar_t>(x[i] * inv_rms));
    out[i] = round_to<scalar_t>(static_cast<float>(weight[i]) * y);
  }
}

void rms_norm_cpu(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double eps) {
  check_rms_norm(out, input, weight);
  const int64_t num_tokens = input.size(0), hidden = input.size(1);
  VGRAPH_DISPATCH_FLOAT_TYPES(input.scalar_type(), "rms_norm_cpu", [&] {
    const scalar_t* in = input.data_ptr<scalar_t>();
    const scalar_t* w = weight.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, num_tokens, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> x(hidden);
      for (int64_t t = begin; t < end; ++t) {
        const scalar_t* row = in + t * input.stride(0);
        for (int64_t i = 0; i < hidden; ++i) x[i] = static_cast<float>(row[i]);
        norm_row<scalar_t>(x.data(), hidden, w, static_cast<float>(eps), o + t * out.stride(0));
      }
    });
  });
}

// residual = (input + residual).to(dtype); input = rms_norm(residual).
void fused_add_rms_norm_cpu(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                            double eps) {
  check_fused_add_rms_norm(input, residual, weight);
  const int64_t num_tokens = input.size(0), hidden = input.size(1);
  VGRAPH_DISPATCH_FLOAT_TYPES(input.scalar_type(), "fused_add_rms_norm_cpu", [&] {
    scalar_t* in = input.data_ptr<scalar_t>();
    scalar_t* res = residual.data_ptr<scalar_t>();
    const scalar_t* w = weight.data_ptr<scalar_t>();
    at::parallel_for(0, num_tokens, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> x(hidden);
      for (int64_t t = begin; t < end; ++t) {
        scalar_t* in_row = in + t * input.stride(0);
        scalar_t* res_row = res + t * residual.stride(0);
        for (int64_t i = 0; i < hidden; ++i) {
          res_row[i] = round_to<scalar_t>(static_cast<float>(in_row[i]) + static_cast<float>(res_row[i]));
          x[i] = static_cast<float>(res_row[i]);
        }
        norm_row<scalar_t>(x.data(), hidden, w, static_cast<float>(eps), in_row);
      }
    });
  });
}

// Neox (rotate-half) rotation of the first rot_dim dims of every head, in place.
template <typename scalar_t>
void rotate_heads(scalar_t* row, int64_t num_heads, int64_t head_size, int64_t half,
                  const float* cos, const float* sin) {
  for (int64_t h = 0; h < num_heads; ++h) {
    scalar_t* x = row + h * head_size;
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = static_cast<float>(x[i]), x2 = static_cast<float>(x[i + half]);
      x[i] = round_to<scalar_t>(x1 * cos[i] - x2 * sin[i]);
      x[i + half] = round_to<scalar_t>(x2 * cos[i] + x1 * sin[i]);
    }
  }
}

// positions as int64, each checked against the cos / sin table's rows.
at::Tensor checked_positions(const at::Tensor& positions, int64_t max_position) {
  at::Tensor pos = positions.to(at::kLong);
  const int64_t* p = pos.data_ptr<int64_t>();
  for (int64_t t = 0; t < pos.size(0); ++t) {
    TORCH_CHECK(p[t] >= 0 && p[t] < max_position, "position ", p[t], " of token ", t,
                " is outside the cos_sin_cache [0, ", max_position, ")");
  }
  return pos;
}

void rotary_embedding_cpu(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                          int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  const int64_t rot_dim =
      check_rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox);
  const int64_t num_tokens = query.size(0), half = rot_dim / 2;
  const at::Tensor pos = checked_positions(positions, cos_sin_cache.size(0));
  const int64_t* p = pos.data_ptr<int64_t>();
  const float* cache = cos_sin_cache.data_ptr<float>();
  VGRAPH_DISPATCH_FLOAT_TYPES(query.scalar_type(), "rotary_embedding_cpu", [&] {
    scalar_t* q = query.data_ptr<scalar_t>();
    scalar_t* k = key.data_ptr<scalar_t>();
    at::parallel_for(0, num_tokens, 16, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float* cos = cache + p[t] * rot_dim;
        rotate_heads<scalar_t>(q + t * query.stride(0), query.size(1) / head_size, head_size, half,
                               cos, cos + half);
        rotate_heads<scalar_t>(k + t * key.stride(0), key.size(1) / head_size, head_size, half, cos,
                               cos + half);
      }
    });
  });
}

// The unit-norm QKV path of rms_norm_qkv_rope (layers.h): row t of qkv (hidden W^T) times hidden
// row t's 1 / rms, plus the bias, then the rotation of the first rope_heads heads when cos_sin
// (the cache, [max_position, head_size]) is given; one rounding per value.
void rms_scale_rope_cpu(at::Tensor& qkv, const at::Tensor& hidden, double eps,
                        const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& positions,
                        const std::optional<at::Tensor>& cos_sin_cache, int64_t head_size,
                        int64_t num_heads, int64_t num_kv_heads) {
  const int64_t num_tokens = qkv.size(0), n = qkv.size(1), k = hidden.size(1);
  const int64_t half = head_size / 2, rope_heads = positions ? num_heads + num_kv_heads : 0;
  const at::Tensor pos =
      positions ? checked_positions(*positions, cos_sin_cache->size(0)) : at::Tensor();
  const float eps32 = static_cast<float>(eps);
  VGRAPH_DISPATCH_FLOAT_TYPES(qkv.scalar_type(), "rms_scale_rope_cpu", [&] {
    const scalar_t* b = bias ? bias->data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, num_tokens, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> y(n);
      for (int64_t t = begin; t < end; ++t) {
        const scalar_t* x = hidden.data_ptr<scalar_t>() + t * hidden.stride(0);
        float sum_sq = 0.f;
        for (int64_t i = 0; i < k; ++i) {
          const float f = static_cast<float>(x[i]);
          sum_sq += f * f;
        }
        const float inv_rms = 1.f / std::sqrt(sum_sq / static_cast<float>(k) + eps32);
        scalar_t* row = qkv.data_ptr<scalar_t>() + t * qkv.stride(0);
        for (int64_t i = 0; i < n; ++i) {
          y[i] = static_cast<float>(row[i]) * inv_rms + (b ? static_cast<float>(b[i]) : 0.f);
        }
        const float* cos =
            positions ? cos_sin_cache->data_ptr<float>() + pos.data_ptr<int64_t>()[t] * head_size
                      : nullptr;
        for (int64_t h = 0; h < rope_heads; ++h) {
          float* v = y.data() + h * head_size;
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = v[i], x2 = v[i + half];
            v[i] = x1 * cos[i] - x2 * cos[half + i];
            v[i + half] = x2 * cos[i] + x1 * cos[half + i];
          }
        }
        for (int64_t i = 0; i < n; ++i) row[i] = round_to<scalar_t>(y[i]);
      }
    });
  });
}

// out = silu(gate).to(dtype) * up: rounded where F.silu(gate) * up rounds, so it matches HF.
void silu_and_mul_cpu(at::Tensor& out, const at::Tensor& input) {
  check_silu_and_mul(out, input);
  const int64_t num_tokens = input.size(0), d = input.size(1) / 2;
  VGRAPH_DISPATCH_FLOAT_TYPES(input.scalar_type(), "silu_and_mul_cpu", [&] {
    const scalar_t* in = input.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, num_tokens, 16, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const scalar_t* gate = in + t * input.stride(0);
        const scalar_t* up = gate + d;
        scalar_t* o_row = o + t * out.stride(0);
        for (int64_t i = 0; i < d; ++i) {
          const float g = static_cast<float>(gate[i]);
          const float act = static_cast<float>(round_to<scalar_t>(g / (1.f + std::exp(-g))));
          o_row[i] = round_to<scalar_t>(act * static_cast<float>(up[i]));
        }
      }
    });
  });
}

// out = weight[ids - start] where start <= id < end, else zeros; ids are checked against the
// vocabulary (F.embedding raises for them too).
void embedding_cpu(at::Tensor& out, const at::Tensor& ids, const at::Tensor& weight, int64_t start,
                   int64_t end, int64_t vocab_size) {
  check_embedding(out, ids, weight, start, end, vocab_size);
  if (ids.numel() == 0) return;
  const at::Tensor id = ids.to(at::kLong);
  TORCH_CHECK(id.min().item<int64_t>() >= 0 && id.max().item<int64_t>() < vocab_size,
              "embedding: ids must be in [0, ", vocab_size, ")");
  const at::Tensor mine = id.ge(start).logical_and(id.lt(end));
  const at::Tensor rows = at::where(mine, id - start, at::zeros_like(id));
  out.copy_(at::where(mine.unsqueeze(-1), at::index_select(weight, 0, rows), 0));
}

}  // namespace

// For the fused decode ops' unfused path (layers.h).
void CpuOps::rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight,
                      double eps) {
  rms_norm_cpu(out, input, weight, eps);
}
void CpuOps::rotary_embedding(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                              int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  rotary_embedding_cpu(positions, query, key, head_size, cos_sin_cache, is_neox);
}
void CpuOps::silu_and_mul(at::Tensor& out, const at::Tensor& input) { silu_and_mul_cpu(out, input); }
void CpuOps::rms_scale_rope(at::Tensor& qkv, const at::Tensor& hidden, double eps,
                            const std::optional<at::Tensor>& bias,
                            const std::optional<at::Tensor>& positions,
                            const std::optional<at::Tensor>& cos_sin_cache, int64_t head_size,
                            int64_t num_heads, int64_t num_kv_heads) {
  rms_scale_rope_cpu(qkv, hidden, eps, bias, positions, cos_sin_cache, head_size, num_heads,
                     num_kv_heads);
}

}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CPU, m) {
  m.impl("rms_norm", &vgraph::rms_norm_cpu);
  m.impl("fused_add_rms_norm", &vgraph::fused_add_rms_norm_cpu);
  m.impl("rotary_embedding", &vgraph::rotary_embedding_cpu);
  m.impl("silu_and_mul", &vgraph::silu_and_mul_cpu);
  m.impl("embedding", &vgraph::embedding_cpu);
}

// Argument checks shared by the CPU and CUDA impls of the fused layer ops (rms_norm,
// fused_add_rms_norm, rotary_embedding, silu_and_mul, embedding), so both devices reject the
// same mistakes with the same messages. Host code only: no kernels, no reads of device data.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

// The dtypes the layer ops support (check_float_dtype), so no double instantiations are built.
#define VGRAPH_DISPATCH_FLOAT_TYPES(TYPE, NAME, ...)          \
  AT_DISPATCH_SWITCH(TYPE, NAME,                              \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__) \
                     AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)  \
                     AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

namespace vgraph {

inline void check_float_dtype(const at::Tensor& t, const char* name) {
  const auto dt = t.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16, name,
              " must be float32, float16 or bfloat16, got ", dt);
}

// A [num_tokens, width] tensor whose rows may be strided but whose last dim is contiguous.
inline void check_rows(const at::Tensor& t, const char* name, const at::Tensor& ref) {
  TORCH_CHECK(t.dim() == 2, name, " must be 2-d [num_tokens, size], got ", t.sizes());
  TORCH_CHECK(t.size(1) == 0 || t.stride(1) == 1, name, " must have a contiguous last dim, got strides ",
              t.strides());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), name, " dtype ", t.scalar_type(), " != ",
              ref.scalar_type());
  TORCH_CHECK(t.device() == ref.device(), name, " is on ", t.device(), ", expected ", ref.device());
}

inline void check_norm_weight(const at::Tensor& weight, const at::Tensor& input) {
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == input.size(1), "weight must be [hidden = ",
              input.size(1), "], got ", weight.sizes());
  TORCH_CHECK(weight.is_contiguous(), "weight must be contiguous");
  TORCH_CHECK(weight.scalar_type() == input.scalar_type(), "weight dtype ", weight.scalar_type(),
              " != input dtype ", input.scalar_type());
  TORCH_CHECK(weight.device() == input.device(), "weight is on ", weight.device(), ", expected ",
              input.device());
}

inline void check_rms_norm(const at::Tensor& out, const at::Tensor& input, const at::Tensor& weight) {
  check_float_dtype(input, "input");
  check_rows(input, "input", input);
  check_rows(out, "out", input);
  TORCH_CHECK(out.sizes() == input.sizes(), "out ", out.sizes(), " != input ", input.sizes());
  TORCH_CHECK(input.size(1) > 0, "hidden size must be > 0");
  check_norm_weight(weight, input);
}

inline void check_fused_add_rms_norm(const at::Tensor& input, const at::Tensor& residual,
                                     const at::Tensor& weight) {
  check_float_dtype(input, "input");
  check_rows(input, "input", input);
  check_rows(residual, "residual", input);
  TORCH_CHECK(residual.sizes() == input.sizes(), "residual ", residual.sizes(), " != input ",
              input.sizes());
  TORCH_CHECK(input.size(1) > 0, "hidden size must be > 0");
  check_norm_weight(weight, input);
}

// Returns rot_dim (cos_sin_cache.size(1)).
inline int64_t check_rotary_embedding(const at::Tensor& positions, const at::Tensor& query,
                                      const at::Tensor& key, int64_t head_size,
                                      const at::Tensor& cos_sin_cache, bool is_neox) {
  TORCH_CHECK(is_neox, "rotary_embedding: only is_neox=True (rotate-half) is supported");
  check_float_dtype(query, "query");
  check_rows(query, "query", query);
  check_rows(key, "key", query);
  TORCH_CHECK(key.size(0) == query.size(0), "key has ", key.size(0), " tokens, query ",
              query.size(0));
  TORCH_CHECK(head_size > 0, "head_size must be > 0, got ", head_size);
  TORCH_CHECK(query.size(1) % head_size == 0 && key.size(1) % head_size == 0,
              "query/key widths ", query.size(1), "/", key.size(1),
              " are not multiples of head_size ", head_size);
  TORCH_CHECK(positions.scalar_type() == at::kLong || positions.scalar_type() == at::kInt,
              "positions must be int64 or int32, got ", positions.scalar_type());
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == query.size(0),
              "positions must be [num_tokens = ", query.size(0), "], got ", positions.sizes());
  TORCH_CHECK(positions.is_contiguous() && positions.device() == query.device(),
              "positions must be contiguous and on ", query.device());
  TORCH_CHECK(cos_sin_cache.scalar_type() == at::kFloat, "cos_sin_cache must be float32, got ",
              cos_sin_cache.scalar_type());
  TORCH_CHECK(cos_sin_cache.dim() == 2 && cos_sin_cache.is_contiguous(),
              "cos_sin_cache must be contiguous [max_position, rot_dim], got ",
              cos_sin_cache.sizes());
  TORCH_CHECK(cos_sin_cache.device() == query.device(), "cos_sin_cache is on ",
              cos_sin_cache.device(), ", expected ", query.device());
  const int64_t rot_dim = cos_sin_cache.size(1);
  TORCH_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_size, "rot_dim ", rot_dim,
              " must be even and in (0, head_size = ", head_size, "]");
  return rot_dim;
}

inline void check_silu_and_mul(const at::Tensor& out, const at::Tensor& input) {
  check_float_dtype(input, "input");
  check_rows(input, "input", input);
  check_rows(out, "out", input);
  TORCH_CHECK(input.size(1) % 2 == 0, "input width ", input.size(1), " must be even (gate | up)");
  TORCH_CHECK(out.size(0) == input.size(0) && out.size(1) == input.size(1) / 2, "out must be [",
              input.size(0), ", ", input.size(1) / 2, "], got ", out.sizes());
}

inline void check_embedding(const at::Tensor& out, const at::Tensor& ids, const at::Tensor& weight,
                            int64_t start, int64_t end, int64_t vocab_size) {
  check_float_dtype(weight, "weight");
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous(), "weight must be a contiguous [rows, "
              "hidden] table, got ", weight.sizes());
  check_rows(out, "out", weight);
  TORCH_CHECK(ids.dim() == 1 && (ids.scalar_type() == at::kLong || ids.scalar_type() == at::kInt),
              "ids must be a 1-d int64 or int32 tensor, got ", ids.scalar_type(), " ", ids.sizes());
  TORCH_CHECK(ids.device() == weight.device(), "ids is on ", ids.device(), ", expected ",
              weight.device());
  TORCH_CHECK(out.size(0) == ids.size(0) && out.size(1) == weight.size(1), "out must be [",
              ids.size(0), ", ", weight.size(1), "], got ", out.sizes());
  TORCH_CHECK(0 <= start && start <= end && end <= vocab_size && end - start <= weight.size(0),
              "need 0 <= start <= end <= vocab_size and end - start <= weight rows (",
              weight.size(0), "), got start ", start, ", end ", end, ", vocab_size ", vocab_size);
}

}  // namespace vgraph

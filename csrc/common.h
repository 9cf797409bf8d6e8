// Argument checks and sizes shared by the CPU and CUDA impls of the vgraph_C ops, so both devices
// reject the same mistakes with the same messages. Host code only: no kernels here.
#pragma once

#include <cstdlib>
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace vgraph {

// A measurement switch, read at each launch (a graph keeps the value it was captured with), so
// variants can share a process: `fallback` when `name` is unset, else an integer in [lo, hi].
inline int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  TORCH_CHECK(*end == '\0' && n >= lo && n <= hi, name, " must be an integer in [", lo, ", ", hi,
              "], got ", v);
  return static_cast<int>(n);
}

// The sizes of one paged_attention call, all known on the host without reading a device tensor.
struct AttentionShape {
  int64_t num_tokens;
  int64_t num_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t block_size;
  int64_t num_reqs;            // requests looked at (<= num_reqs_padded)
  int64_t max_blocks_per_req;  // block_table.size(1)
};

inline void check_cache(const at::Tensor& cache, const char* name, const at::Tensor& ref) {
  TORCH_CHECK(cache.dim() == 4, name, " must be [num_blocks, block_size, num_kv_heads, head_dim], got ",
              cache.sizes());
  TORCH_CHECK(cache.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(cache.scalar_type() == ref.scalar_type(), name, " dtype ", cache.scalar_type(),
              " != ", ref.scalar_type());
  TORCH_CHECK(cache.device() == ref.device(), name, " is on ", cache.device(), ", expected ",
              ref.device());
}

inline void check_reshape_and_cache(const at::Tensor& key, const at::Tensor& value,
                                    const at::Tensor& key_cache, const at::Tensor& value_cache,
                                    const at::Tensor& slot_mapping) {
  TORCH_CHECK(key.dim() == 3 && value.sizes() == key.sizes(),
              "key/value must be [num_tokens, num_kv_heads, head_dim], got ", key.sizes(), " and ",
              value.sizes());
  TORCH_CHECK(key.stride(2) == 1 && value.stride(2) == 1, "key/value head_dim must be contiguous");
  TORCH_CHECK(value.scalar_type() == key.scalar_type(), "value dtype != key dtype");
  check_cache(key_cache, "key_cache", key);
  check_cache(value_cache, "value_cache", key);
  TORCH_CHECK(value_cache.sizes() == key_cache.sizes(), "key_cache and value_cache sizes differ");
  TORCH_CHECK(key_cache.size(2) == key.size(1) && key_cache.size(3) == key.size(2),
              "cache [.., num_kv_heads, head_dim] ", key_cache.sizes(), " does not match key ",
              key.sizes());
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong, "slot_mapping must be int64");
  TORCH_CHECK(slot_mapping.dim() == 1 && slot_mapping.size(0) >= key.size(0),
              "slot_mapping must be [num_tokens], got ", slot_mapping.sizes());
  TORCH_CHECK(slot_mapping.is_contiguous() && slot_mapping.device() == key.device(),
              "slot_mapping must be contiguous and on ", key.device());
}

inline AttentionShape check_paged_attention(const at::Tensor& out, const at::Tensor& query,
                                            const at::Tensor& key_cache,
                                            const at::Tensor& value_cache,
                                            const at::Tensor& query_start_loc,
                                            const at::Tensor& seq_lens,
                                            const at::Tensor& block_table,
                                            std::optional<int64_t> num_reqs) {
  TORCH_CHECK(query.dim() == 3, "query must be [num_tokens, num_heads, head_dim], got ",
              query.sizes());
  TORCH_CHECK(out.sizes() == query.sizes(), "out ", out.sizes(), " != query ", query.sizes());
  TORCH_CHECK(out.scalar_type() == query.scalar_type(), "out dtype != query dtype");
  TORCH_CHECK(query.stride(2) == 1 && out.stride(2) == 1, "query/out head_dim must be contiguous");
  TORCH_CHECK(out.device() == query.device(), "out and query are on different devices");
  check_cache(key_cache, "key_cache", query);
  check_cache(value_cache, "value_cache", query);
  TORCH_CHECK(value_cache.sizes() == key_cache.sizes(), "key_cache and value_cache sizes differ");
  AttentionShape s;
  s.num_tokens = query.size(0);
  s.num_heads = query.size(1);
  s.head_dim = query.size(2);
  s.block_size = key_cache.size(1);
  s.num_kv_heads = key_cache.size(2);
  TORCH_CHECK(key_cache.size(3) == s.head_dim, "cache head_dim ", key_cache.size(3),
              " != query head_dim ", s.head_dim);
  TORCH_CHECK(s.num_kv_heads > 0 && s.num_heads % s.num_kv_heads == 0, "num_heads ", s.num_heads,
              " is not a multiple of num_kv_heads ", s.num_kv_heads);
  TORCH_CHECK(s.block_size > 0 && (s.block_size & (s.block_size - 1)) == 0,
              "block_size must be a power of two, got ", s.block_size);
  for (const at::Tensor* t : {&query_start_loc, &seq_lens, &block_table}) {
    TORCH_CHECK(t->scalar_type() == at::kInt, "query_start_loc/seq_lens/block_table must be int32");
    TORCH_CHECK(t->device() == query.device(), "metadata tensors must be on ", query.device());
  }
  TORCH_CHECK(seq_lens.dim() == 1 && seq_lens.is_contiguous(), "seq_lens must be contiguous 1-d");
  TORCH_CHECK(query_start_loc.dim() == 1 && query_start_loc.is_contiguous(),
              "query_start_loc must be contiguous 1-d");
  TORCH_CHECK(block_table.dim() == 2 && block_table.stride(1) == 1,
              "block_table must be [num_reqs_padded, max_blocks_per_req] with contiguous rows");
  s.num_reqs = num_reqs.value_or(seq_lens.size(0));
  TORCH_CHECK(s.num_reqs >= 0 && s.num_reqs <= seq_lens.size(0), "num_reqs ", s.num_reqs,
              " must be in [0, seq_lens.size(0) = ", seq_lens.size(0), "]");
  TORCH_CHECK(query_start_loc.size(0) >= s.num_reqs + 1, "query_start_loc needs num_reqs + 1 = ",
              s.num_reqs + 1, " entries, got ", query_start_loc.size(0));
  TORCH_CHECK(block_table.size(0) >= s.num_reqs, "block_table needs ", s.num_reqs, " rows, got ",
              block_table.size(0));
  s.max_blocks_per_req = block_table.size(1);
  return s;
}

// paged_attention's append (key, value, slot_mapping: all or none): reshape_and_cache's checks,
// one K/V row per query token. Returns whether the call appends.
inline bool check_append(const AttentionShape& s, const std::optional<at::Tensor>& key,
                         const std::optional<at::Tensor>& value,
                         const std::optional<at::Tensor>& slot_mapping,
                         const at::Tensor& key_cache, const at::Tensor& value_cache) {
  const int given = key.has_value() + value.has_value() + slot_mapping.has_value();
  if (given == 0) return false;
  TORCH_CHECK(given == 3, "paged_attention: key, value and slot_mapping are given together (the "
              "append of this step's K/V), got ", given, " of them");
  check_reshape_and_cache(*key, *value, key_cache, value_cache, *slot_mapping);
  TORCH_CHECK(key->size(0) == s.num_tokens, "paged_attention: key has ", key->size(0),
              " rows, query ", s.num_tokens);
  return true;
}

// cascade_attention: paged_attention's checks, and the shared prefix within the table's width.
inline AttentionShape check_cascade_attention(const at::Tensor& out, const at::Tensor& query,
                                              const at::Tensor& key_cache,
                                              const at::Tensor& value_cache,
                                              const at::Tensor& query_start_loc,
                                              const at::Tensor& seq_lens,
                                              const at::Tensor& block_table,
                                              int64_t num_prefix_blocks,
                                              std::optional<int64_t> num_reqs) {
  const AttentionShape s = check_paged_attention(out, query, key_cache, value_cache,
                                                 query_start_loc, seq_lens, block_table, num_reqs);
  TORCH_CHECK(num_prefix_blocks >= 0 && num_prefix_blocks <= s.max_blocks_per_req,
              "num_prefix_blocks ", num_prefix_blocks, " must be in [0, max_blocks_per_req = ",
              s.max_blocks_per_req, "]");
  TORCH_CHECK(num_prefix_blocks == 0 || block_table.size(0) >= 1,
              "a shared prefix needs block_table row 0");
  return s;
}

// apply_logits_processors: float32 logits [R, V] (rows may be strided), the packed per-row entry
// lists (CSR: row_ptr int32 [R + 1], codes int32 [N], values float32 [N]), params float32 [R, 4],
// and an optional structured-output bitmask int32 [R, >= ceil(V / 32)].
inline void check_logits_processors(const at::Tensor& out, const at::Tensor& logits,
                                    const std::optional<at::Tensor>& bitmask,
                                    const at::Tensor& row_ptr, const at::Tensor& codes,
                                    const at::Tensor& values, const at::Tensor& params) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.stride(1) == 1,
              "logits must be float32 [num_rows, vocab] with contiguous rows, got ",
              logits.scalar_type(), " ", logits.sizes());
  TORCH_CHECK(out.sizes() == logits.sizes() && out.scalar_type() == at::kFloat &&
                  out.stride(1) == 1 && out.device() == logits.device(),
              "out must be float32 ", logits.sizes(), " on ", logits.device());
  const int64_t rows = logits.size(0);
  auto check_vec = [&](const at::Tensor& t, const char* name, at::ScalarType dtype) {
    TORCH_CHECK(t.dim() == 1 && t.is_contiguous() && t.scalar_type() == dtype &&
                    t.device() == logits.device(),
                name, " must be a contiguous ", dtype, " vector on ", logits.device());
  };
  check_vec(row_ptr, "row_ptr", at::kInt);
  check_vec(codes, "codes", at::kInt);
  check_vec(values, "values", at::kFloat);
  TORCH_CHECK(row_ptr.size(0) == rows + 1, "row_ptr must be [num_rows + 1], got ",
              row_ptr.sizes());
  TORCH_CHECK(values.size(0) == codes.size(0), "values and codes lengths differ");
  TORCH_CHECK(params.dim() == 2 && params.size(0) == rows && params.size(1) == 4 &&
                  params.is_contiguous() && params.scalar_type() == at::kFloat &&
                  params.device() == logits.device(),
              "params must be contiguous float32 [num_rows, 4], got ", params.sizes());
  if (bitmask) {
    TORCH_CHECK(bitmask->dim() == 2 && bitmask->size(0) == rows &&
                    bitmask->size(1) * 32 >= logits.size(1) && bitmask->stride(1) == 1 &&
                    bitmask->scalar_type() == at::kInt && bitmask->device() == logits.device(),
                "bitmask must be int32 [num_rows, ceil(vocab / 32)], got ", bitmask->sizes());
  }
}

// argmax_rows: float32 or 16-bit logits [R, V] (rows may be strided), out int64 [R].
inline void check_argmax_rows(const at::Tensor& out, const at::Tensor& logits) {
  const at::ScalarType dtype = logits.scalar_type();
  TORCH_CHECK(logits.dim() == 2 && logits.stride(1) == 1 &&
                  (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf),
              "logits must be float32, bfloat16 or float16 [num_rows, vocab] with contiguous rows,"
              " got ", dtype, " ", logits.sizes());
  TORCH_CHECK(logits.size(1) > 0 && logits.size(1) < (1LL << 31),
              "vocab must be in [1, 2^31), got ", logits.size(1));
  TORCH_CHECK(out.dim() == 1 && out.size(0) == logits.size(0) && out.scalar_type() == at::kLong &&
                  out.is_contiguous() && out.device() == logits.device(),
              "out must be a contiguous int64 [", logits.size(0), "] on ", logits.device(),
              ", got ", out.scalar_type(), " ", out.sizes());
}

}  // namespace vgraph

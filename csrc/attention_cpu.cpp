// paged_attention on the CPU: causal attention of every query token over its request's paged K/V,
// float32 math with an online softmax, one work item per (token, kv head) so a GQA group's query
// heads share each K/V row read. Reference: vgraph/attention/ops_ref.py::paged_attention_ref.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "cache.h"
#include "common.h"

namespace vgraph {
namespace {

// Owner request of each token, -1 for pad tokens; the context length (positions attended) of each.
void map_tokens(const AttentionShape& s, const int32_t* qsl, const int32_t* seq_lens,
                std::vector<int32_t>& token_req, std::vector<int64_t>& token_ctx) {
  const int64_t max_ctx = s.max_blocks_per_req * s.block_size;
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t start = std::max<int64_t>(qsl[r], 0);
    const int64_t end = std::min<int64_t>(qsl[r + 1], s.num_tokens);
    const int64_t q_len = int64_t(qsl[r + 1]) - qsl[r];
    for (int64_t t = start; t < end; ++t) {
      // Query token i of the request sits at position seq_len - q_len + i and sees 0..position.
      const int64_t ctx = int64_t(seq_lens[r]) - q_len + (t - qsl[r]) + 1;
      token_req[t] = static_cast<int32_t>(r);
      token_ctx[t] = std::clamp<int64_t>(ctx, 0, max_ctx);
    }
  }
}

template <typename scalar_t>
void attend(const AttentionShape& s, at::Tensor& out, const at::Tensor& query,
            const at::Tensor& key_cache, const at::Tensor& value_cache,
            const at::Tensor& block_table, const std::vector<int32_t>& token_req,
            const std::vector<int64_t>& token_ctx, float scale) {
  const int64_t D = s.head_dim;
  const int64_t G = s.num_heads / s.num_kv_heads;  // query heads per kv head
  const int64_t bs = s.block_size;
  const int64_t tok_stride = s.num_kv_heads * D;  // cache elements between two slots
  const int64_t block_stride = bs * tok_stride;
  const scalar_t* q_ptr = query.data_ptr<scalar_t>();
  const scalar_t* k_ptr = key_cache.data_ptr<scalar_t>();
  const scalar_t* v_ptr = value_cache.data_ptr<scalar_t>();
  scalar_t* o_ptr = out.data_ptr<scalar_t>();
  const int32_t* bt_ptr = block_table.data_ptr<int32_t>();
  const int64_t bt_stride = block_table.stride(0);
  const int64_t num_blocks = key_cache.size(0);

  at::parallel_for(0, s.num_tokens * s.num_kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q(G * D), acc(G * D), row(D), scores(G * bs), m(G), l(G);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / s.num_kv_heads;
      const int64_t kvh = item % s.num_kv_heads;
      const int64_t ctx = token_ctx[t];
      const int64_t r = token_req[t];
      if (r < 0 || ctx == 0) {  // pad token: the output row is defined as zeros
        for (int64_t g = 0; g < G; ++g) {
          scalar_t* o = o_ptr + t * out.stride(0) + (kvh * G + g) * out.stride(1);
          std::fill(o, o + D, scalar_t(0));
        }
        continue;
      }
      for (int64_t g = 0; g < G; ++g) {
        const scalar_t* qh = q_ptr + t * query.stride(0) + (kvh * G + g) * query.stride(1);
        for (int64_t d = 0; d < D; ++d) q[g * D + d] = static_cast<float>(qh[d]) * scale;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.f);
      const int32_t* blocks = bt_ptr + r * bt_stride;
      for (int64_t b = 0; b * bs < ctx; ++b) {
        const int64_t blk = blocks[b];
        TORCH_CHECK(blk >= 0 && blk < num_blocks, "block id ", blk, " out of range");
        const int64_t n = std::min(bs, ctx - b * bs);
        const scalar_t* kb = k_ptr + blk * block_stride + kvh * D;
        const scalar_t* vb = v_ptr + blk * block_stride + kvh * D;
        // 1. scores of this block's positions for every head of the group.
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t d = 0; d < D; ++d) row[d] = static_cast<float>(kb[j * tok_stride + d]);
          for (int64_t g = 0; g < G; ++g) {
            float dot = 0.f;
            for (int64_t d = 0; d < D; ++d) dot += q[g * D + d] * row[d];
            scores[g * bs + j] = dot;
          }
        }
        // 2. online softmax: rescale the running sums once per block, then turn scores into p.
        for (int64_t g = 0; g < G; ++g) {
          float mx = m[g];
          for (int64_t j = 0; j < n; ++j) mx = std::max(mx, scores[g * bs + j]);
          const float alpha = std::exp(m[g] - mx);  // exp(-inf) = 0 on the first block
          l[g] *= alpha;
          for (int64_t d = 0; d < D; ++d) acc[g * D + d] *= alpha;
          for (int64_t j = 0; j < n; ++j) {
            const float p = std::exp(scores[g * bs + j] - mx);
            scores[g * bs + j] = p;
            l[g] += p;
          }
          m[g] = mx;
        }
        // 3. acc += p * V, each V row converted once for the whole group.
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t d = 0; d < D; ++d) row[d] = static_cast<float>(vb[j * tok_stride + d]);
          for (int64_t g = 0; g < G; ++g) {
            const float p = scores[g * bs + j];
            for (int64_t d = 0; d < D; ++d) acc[g * D + d] += p * row[d];
          }
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        scalar_t* o = o_ptr + t * out.stride(0) + (kvh * G + g) * out.stride(1);
        const float inv = 1.f / l[g];
        for (int64_t d = 0; d < D; ++d) o[d] = static_cast<scalar_t>(acc[g * D + d] * inv);
      }
    }
  });
}

void paged_attention_cpu(at::Tensor& out, const at::Tensor& query, at::Tensor& key_cache,
                         at::Tensor& value_cache, const at::Tensor& query_start_loc,
                         const at::Tensor& seq_lens, const at::Tensor& block_table, double scale,
                         std::optional<int64_t> num_reqs, const std::optional<at::Tensor>& key,
                         const std::optional<at::Tensor>& value,
                         const std::optional<at::Tensor>& slot_mapping) {
  const AttentionShape s = check_paged_attention(out, query, key_cache, value_cache,
                                                 query_start_loc, seq_lens, block_table, num_reqs);
  if (check_append(s, key, value, slot_mapping, key_cache, value_cache)) {
    reshape_and_cache_cpu(*key, *value, key_cache, value_cache, *slot_mapping);
  }
  std::vector<int32_t> token_req(s.num_tokens, -1);
  std::vector<int64_t> token_ctx(s.num_tokens, 0);
  map_tokens(s, query_start_loc.data_ptr<int32_t>(), seq_lens.data_ptr<int32_t>(), token_req,
             token_ctx);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, query.scalar_type(), "paged_attention_cpu", [&] {
    attend<scalar_t>(s, out, query, key_cache, value_cache, block_table, token_req, token_ctx,
                     static_cast<float>(scale));
  });
}

}  // namespace
}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CPU, m) { m.impl("paged_attention", &vgraph::paged_attention_cpu); }

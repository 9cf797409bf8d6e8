// cascade_attention on the CPU: paged attention split at a prefix shared by every request. Per
// (token, kv head) work item: an online softmax over the shared prefix (block_table row 0's first
// num_prefix_blocks blocks, no causal mask: every query sits after it), another over the request's
// own positions after it (causal), then a merge of the two partials by their log-sum-exp.
// Reference: vgraph/attention/ops_ref.py::cascade_attention_ref.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "common.h"

namespace vgraph {
namespace {

// Running (unnormalised) softmax state of the G query heads of one kv head.
struct Partial {
  std::vector<float> acc, m, l;  // [G * D], [G], [G]
  Partial(int64_t G, int64_t D)
      : acc(G * D, 0.f), m(G, -std::numeric_limits<float>::infinity()), l(G, 0.f) {}
};

// Adds positions [lo, hi) of one block-table row to `p`, for query heads q[G * D] (scaled).
template <typename scalar_t>
void attend_range(Partial& p, const std::vector<float>& q, const int32_t* blocks, int64_t lo,
                  int64_t hi, const scalar_t* k_ptr, const scalar_t* v_ptr, int64_t kvh,
                  int64_t G, int64_t D, int64_t bs, int64_t tok_stride, int64_t num_blocks) {
  std::vector<float> row(D);
  for (int64_t pos = lo; pos < hi; ++pos) {
    const int64_t blk = blocks[pos / bs];
    TORCH_CHECK(blk >= 0 && blk < num_blocks, "block id ", blk, " out of range");
    const int64_t slot = blk * bs + pos % bs;
    const scalar_t* kr = k_ptr + slot * tok_stride + kvh * D;
    const scalar_t* vr = v_ptr + slot * tok_stride + kvh * D;
    for (int64_t d = 0; d < D; ++d) row[d] = static_cast<float>(kr[d]);
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.f;
      for (int64_t d = 0; d < D; ++d) s += q[g * D + d] * row[d];
      const float mx = std::max(p.m[g], s);
      const float alpha = std::exp(p.m[g] - mx), w = std::exp(s - mx);
      p.l[g] = p.l[g] * alpha + w;
      float* acc = p.acc.data() + g * D;
      for (int64_t d = 0; d < D; ++d) acc[d] = acc[d] * alpha + w * static_cast<float>(vr[d]);
      p.m[g] = mx;
    }
  }
}

template <typename scalar_t>
void cascade(const AttentionShape& s, at::Tensor& out, const at::Tensor& query,
             const at::Tensor& key_cache, const at::Tensor& value_cache, const int32_t* qsl,
             const int32_t* seq_lens, const at::Tensor& block_table, int64_t num_prefix_blocks,
             float scale) {
  const int64_t D = s.head_dim, G = s.num_heads / s.num_kv_heads, bs = s.block_size;
  const int64_t tok_stride = s.num_kv_heads * D;
  const int64_t prefix_len = num_prefix_blocks * bs;
  const scalar_t* q_ptr = query.data_ptr<scalar_t>();
  const scalar_t* k_ptr = key_cache.data_ptr<scalar_t>();
  const scalar_t* v_ptr = value_cache.data_ptr<scalar_t>();
  scalar_t* o_ptr = out.data_ptr<scalar_t>();
  const int32_t* bt = block_table.data_ptr<int32_t>();
  const int64_t bt_stride = block_table.stride(0), num_blocks = key_cache.size(0);
  std::vector<int32_t> token_req(s.num_tokens, -1);
  for (int64_t r = 0; r < s.num_reqs; ++r)
    for (int64_t t = std::max<int64_t>(qsl[r], 0); t < std::min<int64_t>(qsl[r + 1], s.num_tokens); ++t)
      token_req[t] = static_cast<int32_t>(r);

  at::parallel_for(0, s.num_tokens * s.num_kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q(G * D);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / s.num_kv_heads, kvh = item % s.num_kv_heads;
      const int64_t r = token_req[t];
      const int64_t q_len = r < 0 ? 0 : int64_t(qsl[r + 1]) - qsl[r];
      const int64_t ctx = r < 0 ? 0 : std::min<int64_t>(
          int64_t(seq_lens[r]) - q_len + (t - qsl[r]) + 1, s.max_blocks_per_req * bs);
      scalar_t* o = o_ptr + t * out.stride(0) + kvh * G * out.stride(1);
      if (ctx <= 0) {  // pad token: the output row is defined as zeros
        for (int64_t g = 0; g < G; ++g) std::fill(o + g * out.stride(1), o + g * out.stride(1) + D, scalar_t(0));
        continue;
      }
      TORCH_CHECK(ctx > prefix_len, "query token ", t, " sits inside the shared prefix");
      for (int64_t g = 0; g < G; ++g) {
        const scalar_t* qh = q_ptr + t * query.stride(0) + (kvh * G + g) * query.stride(1);
        for (int64_t d = 0; d < D; ++d) q[g * D + d] = static_cast<float>(qh[d]) * scale;
      }
      // 1. the shared prefix (row 0's blocks); 2. this request's suffix (its own row)
      Partial pre(G, D), suf(G, D);
      attend_range(pre, q, bt, 0, prefix_len, k_ptr, v_ptr, kvh, G, D, bs, tok_stride, num_blocks);
      attend_range(suf, q, bt + r * bt_stride, prefix_len, ctx, k_ptr, v_ptr, kvh, G, D, bs,
                   tok_stride, num_blocks);
      // 3. merge: lse_i = m_i + log(l_i); weights exp(lse_i - max lse), as merge_attn_states
      for (int64_t g = 0; g < G; ++g) {
        const float lse_p = pre.l[g] > 0.f ? pre.m[g] + std::log(pre.l[g]) : -INFINITY;
        const float lse_s = suf.l[g] > 0.f ? suf.m[g] + std::log(suf.l[g]) : -INFINITY;
        const float mx = std::max(lse_p, lse_s);
        const float w_p = lse_p == -INFINITY ? 0.f : std::exp(lse_p - mx);
        const float w_s = lse_s == -INFINITY ? 0.f : std::exp(lse_s - mx);
        const float inv_p = pre.l[g] > 0.f ? w_p / pre.l[g] : 0.f;  // normalise, then weight
        const float inv_s = suf.l[g] > 0.f ? w_s / suf.l[g] : 0.f;
        const float inv = 1.f / (w_p + w_s);
        for (int64_t d = 0; d < D; ++d) {
          const float v = (pre.acc[g * D + d] * inv_p + suf.acc[g * D + d] * inv_s) * inv;
          o[g * out.stride(1) + d] = static_cast<scalar_t>(v);
        }
      }
    }
  });
}

void cascade_attention_cpu(at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                           const at::Tensor& value_cache, const at::Tensor& query_start_loc,
                           const at::Tensor& seq_lens, const at::Tensor& block_table,
                           int64_t num_prefix_blocks, double scale,
                           std::optional<int64_t> num_reqs) {
  const AttentionShape s = check_cascade_attention(out, query, key_cache, value_cache,
                                                   query_start_loc, seq_lens, block_table,
                                                   num_prefix_blocks, num_reqs);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, query.scalar_type(), "cascade_attention_cpu", [&] {
    cascade<scalar_t>(s, out, query, key_cache, value_cache, query_start_loc.data_ptr<int32_t>(),
                      seq_lens.data_ptr<int32_t>(), block_table, num_prefix_blocks,
                      static_cast<float>(scale));
  });
}

}  // namespace
}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CPU, m) { m.impl("cascade_attention", &vgraph::cascade_attention_cpu); }

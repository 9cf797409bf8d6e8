// cascade_attention on CUDA: paged attention split at a prefix every request shares, in three
// launches on the current stream.
//   1. prefix: grid (query tiles, kv heads, prefix splits). A CTA takes a tile of TQ query tokens x
//      the G query heads of one kv head (TQ * G <= 32 rows) and streams one partition of the shared
//      prefix (block_table row 0's first num_prefix_blocks blocks) through shared memory once for
//      all of them, with no causal mask: the prefix KV is read once per tile, not once per token.
//   2. suffix: grid (query tokens, kv heads, suffix splits): the same kernel with a tile of one
//      token, over its own request's positions [prefix_len, context), causal by construction.
//   3. merge: grid (query tokens, num_heads): the unnormalised partials (accumulator, max, sum) of
//      every partition are merged by their log-sum-exp into the output row; pad tokens get zeros.
// Float32 math throughout. Every length, request boundary and block id of a request is read on the
// device; the grids depend only on num_tokens, num_prefix_blocks (a launch-time constant, like the
// sizes) and static sizes, so a captured graph stays correct when the metadata buffers change.
// Reference: vgraph/attention/ops_ref.py::cascade_attention_ref.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

#include "common.h"
#include "device_info.cuh"

namespace vgraph {
namespace {

constexpr int kThreads = 128;
constexpr int kRows = 32;  // query rows (token x head) per CTA at most
constexpr int kChunk = 16;  // positions staged in shared memory at a time

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(c10::Half x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_float(c10::BFloat16 x) { return static_cast<float>(x); }

// The request owning token t (largest r < num_reqs with qsl[r] <= t, if t < qsl[r + 1]), or -1.
__device__ __forceinline__ int owner_of(const int* qsl, int num_reqs, int t) {
  int lo = 0, hi = num_reqs - 1, r = -1;
  while (lo <= hi) {
    const int mid = (lo + hi) >> 1;
    if (qsl[mid] <= t) { r = mid; lo = mid + 1; } else { hi = mid - 1; }
  }
  return (r >= 0 && t < qsl[r + 1]) ? r : -1;
}

struct CascadeParams {
  const void* query;
  const void* key_cache;
  const void* value_cache;
  void* out;
  const int* qsl;
  const int* seq_lens;
  const int* block_table;
  float* ws_acc;  // [num_parts, num_tokens, num_heads, head_dim]
  float* ws_ml;   // [num_parts, num_tokens, num_heads, 2] = max, sum
  int64_t q_tok_stride, q_head_stride, o_tok_stride, o_head_stride, bt_stride;
  int num_tokens, num_heads, num_kv_heads, group, num_reqs, block_size, max_ctx;
  int prefix_len, num_prefix_splits, num_suffix_splits;
  float scale;
};

// One partition of positions for a tile of query rows; writes unnormalised partials.
// PREFIX: tile of tokens_per_tile tokens over [0, prefix_len) from row 0 (split blockIdx.z).
// !PREFIX: one token over [prefix_len, its context) from its request's row.
template <typename scalar_t, int D, bool PREFIX>
__global__ void __launch_bounds__(kThreads) cascade_partial_kernel(CascadeParams p,
                                                                   int tokens_per_tile) {
  __shared__ float q_s[kRows][D];
  __shared__ float k_s[kChunk][D + 1];  // +1: the score loop reads 16 rows at one d
  __shared__ float v_s[kChunk][D];
  __shared__ float s_s[kRows][kChunk];
  __shared__ float alpha_s[kRows];
  __shared__ int range_s[3];  // lo, hi, request row
  constexpr int kPerThread = kRows * D / kThreads;
  const int tid = threadIdx.x;
  const int kvh = blockIdx.y;
  const int G = p.group;
  const int rows = tokens_per_tile * G;
  const int t0 = blockIdx.x * tokens_per_tile;
  const int split = blockIdx.z;
  const int part = PREFIX ? split : p.num_prefix_splits + split;

  if (tid == 0) {
    int lo = 0, hi = 0, req = 0;
    if (PREFIX) {
      const int chunk = (p.prefix_len + p.num_prefix_splits - 1) / p.num_prefix_splits;
      lo = split * chunk;
      hi = min(p.prefix_len, lo + chunk);
    } else {
      req = owner_of(p.qsl, p.num_reqs, t0);
      if (req >= 0) {
        const int q_len = p.qsl[req + 1] - p.qsl[req];
        const int ctx = min(p.seq_lens[req] - q_len + (t0 - p.qsl[req]) + 1, p.max_ctx);
        const int len = max(ctx - p.prefix_len, 0);
        const int chunk = ((len + p.num_suffix_splits - 1) / p.num_suffix_splits + 15) & ~15;
        lo = p.prefix_len + split * chunk;
        hi = min(ctx, lo + chunk);
      }
    }
    range_s[0] = lo;
    range_s[1] = max(hi, lo);
    range_s[2] = max(req, 0);
  }
  // queries, pre-scaled
  for (int e = tid; e < rows * D; e += kThreads) {
    const int r = e / D, d = e % D;
    const int t = t0 + r / G, h = kvh * G + r % G;
    float x = 0.f;
    if (t < p.num_tokens) {
      const scalar_t* q = static_cast<const scalar_t*>(p.query);
      x = to_float(q[t * p.q_tok_stride + h * p.q_head_stride + d]) * p.scale;
    }
    q_s[r][d] = x;
  }
  __syncthreads();
  const int lo = range_s[0], hi = range_s[1];
  const int* blocks = p.block_table + static_cast<int64_t>(range_s[2]) * p.bt_stride;
  const scalar_t* kc = static_cast<const scalar_t*>(p.key_cache);
  const scalar_t* vc = static_cast<const scalar_t*>(p.value_cache);
  const int64_t tok_stride = static_cast<int64_t>(p.num_kv_heads) * D;

  float acc[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;  // row tid's running max and sum (tid < rows)

  for (int c0 = lo; c0 < hi; c0 += kChunk) {
    const int n = min(kChunk, hi - c0);
    // 1. stage K and V of positions c0..c0+n as float
    for (int e = tid; e < kChunk * D; e += kThreads) {
      const int j = e / D, d = e % D;
      float kx = 0.f, vx = 0.f;
      if (j < n) {
        const int pos = c0 + j;
        const int64_t slot = static_cast<int64_t>(blocks[pos / p.block_size]) * p.block_size +
                             pos % p.block_size;
        kx = to_float(kc[slot * tok_stride + kvh * D + d]);
        vx = to_float(vc[slot * tok_stride + kvh * D + d]);
      }
      k_s[j][d] = kx;
      v_s[j][d] = vx;
    }
    __syncthreads();
    // 2. scores of every row against the chunk
    for (int e = tid; e < rows * kChunk; e += kThreads) {
      const int r = e / kChunk, j = e % kChunk;
      float s = -INFINITY;
      if (j < n) {
        s = 0.f;
#pragma unroll 16
        for (int d = 0; d < D; ++d) s += q_s[r][d] * k_s[j][d];
      }
      s_s[r][j] = s;
    }
    __syncthreads();
    // 3. online softmax per row: scores -> probabilities, rescale factor for the accumulators
    if (tid < rows) {
      float mx = m;
      for (int j = 0; j < n; ++j) mx = fmaxf(mx, s_s[tid][j]);
      const float alpha = __expf(m - mx);  // m = -inf on the first chunk: 0
      float sum = 0.f;
      for (int j = 0; j < kChunk; ++j) {
        const float pj = j < n ? __expf(s_s[tid][j] - mx) : 0.f;
        s_s[tid][j] = pj;
        sum += pj;
      }
      l = l * alpha + sum;
      m = mx;
      alpha_s[tid] = alpha;
    }
    __syncthreads();
    // 4. acc = acc * alpha + P V
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int e = tid + i * kThreads;
      const int r = e / D, d = e % D;
      if (r < rows) {
        float x = acc[i] * alpha_s[r];
        for (int j = 0; j < n; ++j) x += s_s[r][j] * v_s[j][d];
        acc[i] = x;
      }
    }
    __syncthreads();
  }
  // partials of the rows of real tokens; an empty range leaves max -inf and sum 0
  const int64_t part_base = static_cast<int64_t>(part) * p.num_tokens * p.num_heads;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = tid + i * kThreads;
    const int r = e / D, d = e % D;
    const int t = t0 + r / G, h = kvh * G + r % G;
    if (r < rows && t < p.num_tokens)
      p.ws_acc[(part_base + static_cast<int64_t>(t) * p.num_heads + h) * D + d] = acc[i];
  }
  if (tid < rows) {
    const int t = t0 + tid / G, h = kvh * G + tid % G;
    if (t < p.num_tokens) {
      float* ml = p.ws_ml + (part_base + static_cast<int64_t>(t) * p.num_heads + h) * 2;
      ml[0] = m;
      ml[1] = l;
    }
  }
}

// Merge every partition's partial of one (token, head) by log-sum-exp; pad tokens -> zeros.
template <typename scalar_t, int D>
__global__ void __launch_bounds__(D) cascade_merge_kernel(CascadeParams p) {
  const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  scalar_t* o = static_cast<scalar_t*>(p.out) + t * p.o_tok_stride + h * p.o_head_stride;
  const int req = owner_of(p.qsl, p.num_reqs, t);
  if (req < 0 || p.seq_lens[req] <= 0) {
    o[d] = static_cast<scalar_t>(0.f);
    return;
  }
  const int num_parts = p.num_prefix_splits + p.num_suffix_splits;
  const int64_t row = static_cast<int64_t>(t) * p.num_heads + h;
  const int64_t part_stride = static_cast<int64_t>(p.num_tokens) * p.num_heads;
  float mx = -INFINITY;
  for (int i = 0; i < num_parts; ++i) mx = fmaxf(mx, p.ws_ml[(i * part_stride + row) * 2]);
  float num = 0.f, den = 0.f;
  for (int i = 0; i < num_parts; ++i) {
    const float* ml = p.ws_ml + (i * part_stride + row) * 2;
    if (ml[1] <= 0.f) continue;  // an empty partition
    const float w = __expf(ml[0] - mx);
    num += p.ws_acc[(i * part_stride + row) * D + d] * w;
    den += ml[1] * w;
  }
  o[d] = static_cast<scalar_t>(den > 0.f ? num / den : 0.f);
}

template <typename scalar_t, int D>
void launch(const AttentionShape& s, CascadeParams p, const at::Tensor& query,
            cudaStream_t stream) {
  const int waves = 2 * num_sms(query.get_device());  // CTAs to aim for: two per SM
  const int tokens_per_tile = std::max(1, kRows / p.group);
  const int tiles = (p.num_tokens + tokens_per_tile - 1) / tokens_per_tile;
  const int kvh = p.num_kv_heads;
  // prefix: partitions of at least 256 positions until the grid fills the device
  p.num_prefix_splits = p.prefix_len == 0 ? 0 : std::clamp(
      (waves + tiles * kvh - 1) / (tiles * kvh), 1, std::max(1, p.prefix_len / 256));
  // suffix: its length is only known on the device; bound by the table width
  const int max_suffix = std::max(p.max_ctx - p.prefix_len, 1);
  p.num_suffix_splits = std::clamp((waves + p.num_tokens * kvh - 1) / (p.num_tokens * kvh), 1,
                                   std::max(1, max_suffix / 512));
  const int num_parts = p.num_prefix_splits + p.num_suffix_splits;
  at::Tensor ws_acc = at::empty({num_parts, p.num_tokens, p.num_heads, D},
                                query.options().dtype(at::kFloat));
  at::Tensor ws_ml = at::empty({num_parts, p.num_tokens, p.num_heads, 2},
                               query.options().dtype(at::kFloat));
  p.ws_acc = ws_acc.data_ptr<float>();
  p.ws_ml = ws_ml.data_ptr<float>();
  if (p.num_prefix_splits > 0) {
    cascade_partial_kernel<scalar_t, D, true>
        <<<dim3(tiles, kvh, p.num_prefix_splits), kThreads, 0, stream>>>(p, tokens_per_tile);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  cascade_partial_kernel<scalar_t, D, false>
      <<<dim3(p.num_tokens, kvh, p.num_suffix_splits), kThreads, 0, stream>>>(p, 1);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  cascade_merge_kernel<scalar_t, D><<<dim3(p.num_tokens, p.num_heads), D, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t>
void dispatch_head_dim(const AttentionShape& s, const CascadeParams& p, const at::Tensor& query,
                       cudaStream_t stream) {
  if (s.head_dim == 64) return launch<scalar_t, 64>(s, p, query, stream);
  return launch<scalar_t, 128>(s, p, query, stream);
}

void cascade_attention_cuda(at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                            const at::Tensor& value_cache, const at::Tensor& query_start_loc,
                            const at::Tensor& seq_lens, const at::Tensor& block_table,
                            int64_t num_prefix_blocks, double scale,
                            std::optional<int64_t> num_reqs) {
  const AttentionShape s = check_cascade_attention(out, query, key_cache, value_cache,
                                                   query_start_loc, seq_lens, block_table,
                                                   num_prefix_blocks, num_reqs);
  TORCH_CHECK(s.head_dim == 64 || s.head_dim == 128, "CUDA cascade_attention supports head_dim "
              "64 and 128, got ", s.head_dim);
  const int64_t group = s.num_heads / s.num_kv_heads;
  TORCH_CHECK(group <= kRows, "CUDA cascade_attention supports up to ", kRows,
              " query heads per kv head, got ", group);
  TORCH_CHECK(s.num_tokens <= INT32_MAX && s.max_blocks_per_req * s.block_size <= INT32_MAX,
              "cascade_attention sizes exceed int32");
  if (s.num_tokens == 0) return;
  const c10::cuda::CUDAGuard guard(query.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  CascadeParams p{};
  p.query = query.data_ptr();
  p.key_cache = key_cache.data_ptr();
  p.value_cache = value_cache.data_ptr();
  p.out = out.data_ptr();
  p.qsl = query_start_loc.data_ptr<int>();
  p.seq_lens = seq_lens.data_ptr<int>();
  p.block_table = block_table.data_ptr<int>();
  p.q_tok_stride = query.stride(0);
  p.q_head_stride = query.stride(1);
  p.o_tok_stride = out.stride(0);
  p.o_head_stride = out.stride(1);
  p.bt_stride = block_table.stride(0);
  p.num_tokens = static_cast<int>(s.num_tokens);
  p.num_heads = static_cast<int>(s.num_heads);
  p.num_kv_heads = static_cast<int>(s.num_kv_heads);
  p.group = static_cast<int>(group);
  p.num_reqs = static_cast<int>(s.num_reqs);
  p.block_size = static_cast<int>(s.block_size);
  p.max_ctx = static_cast<int>(s.max_blocks_per_req * s.block_size);
  p.prefix_len = static_cast<int>(num_prefix_blocks * s.block_size);
  p.scale = static_cast<float>(scale);
  switch (query.scalar_type()) {
    case at::kFloat: return dispatch_head_dim<float>(s, p, query, stream);
    case at::kHalf: return dispatch_head_dim<c10::Half>(s, p, query, stream);
    case at::kBFloat16: return dispatch_head_dim<c10::BFloat16>(s, p, query, stream);
    default: TORCH_CHECK(false, "CUDA cascade_attention supports float32/float16/bfloat16, got ",
                         query.scalar_type());
  }
}

}  // namespace
}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CUDA, m) {
  m.impl("cascade_attention", &vgraph::cascade_attention_cuda);
}

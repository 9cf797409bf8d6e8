// The fused layer ops on CUDA: rms_norm, fused_add_rms_norm, rotary_embedding, silu_and_mul,
// embedding; and rms_scale_rope, the unit-norm path of rms_norm_qkv_rope (layers.h; no op of its
// own).
// One kernel launch per op, one CTA per token; the grid is num_tokens and the CTA size depends
// only on static sizes (hidden, heads), so a captured graph replays correctly for any contents of
// its buffers. Nothing reads device data on the host. 16-byte vectors when the row width, strides
// and pointers allow (VEC = 16 / sizeof(dtype)), else scalars. float32 math, rounded to the dtype at
// the same points as the torch code they replace (twin: layers_cpu.cpp).
//
// Programmatic dependent launch (pdl.cuh): each kernel lets the next one start at once and waits
// for the previous one before its first load, so a PDL kernel after it (attention after the rope
// kernel, the first fused GEMV after the embedding) runs its independent prologue meanwhile, and
// it starts behind a PDL kernel that triggers early (the norm kernel after the fused O
// projection) without a full kernel boundary. VGRAPH_PDL_LAYERS=0 launches them plainly
// (comparisons; read at each launch, so a graph keeps what it was captured with).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/macros/Macros.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <type_traits>

#include "common.h"
#include "layers.h"
#include "layers_common.h"
#include "pdl.cuh"

namespace vgraph {
namespace {

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename scalar_t>
__device__ __forceinline__ scalar_t round_to(float v) {
  return static_cast<scalar_t>(v);
}

// Sum of v over the CTA (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// Called once per kernel, so the shared scratch needs no second barrier.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  __shared__ float total;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < blockDim.x / 32 ? warp_sums[lane] : 0.f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// Threads for `work` independent items per token: a multiple of 32 in [32, max_threads].
int threads_for(int64_t work, int max_threads) {
  const int64_t t = (work + 31) / 32 * 32;
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(t, 32), max_threads));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// kernel<<<grid, block, 0, stream>>>(args...), with programmatic stream serialization unless
// VGRAPH_PDL_LAYERS=0 (the kernel begins with pdl_prologue(), or its two halves around the
// loads of what no kernel of ours writes: rms_norm's weight, rotary's positions and cos / sin).
template <typename... Params, typename... Args>
void launch_layer_kernel(void (*kernel)(Params...), int64_t grid, int block, cudaStream_t stream,
                         Args... args) {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = pdl::launch_config(dim3(static_cast<unsigned>(grid)), dim3(block), 0,
                                              stream, attr);
  if (env_int("VGRAPH_PDL_LAYERS", 1, 0, 1) == 0) cfg.numAttrs = 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
}

// The first statement of the kernels here: the next kernel may start (its prologue reads nothing
// this one writes), and nothing below runs before the previous kernel's writes are visible, nor
// writes what it may still read. Before the wait a kernel may read only what the step does not
// write or what a kernel that lets its dependents in only at its exit wrote (any torch kernel, a
// copy): a kernel of ours may still be running there.
__device__ __forceinline__ void pdl_prologue() {
  pdl::launch_dependents();
  pdl::wait();
}

// ---- rms_norm / fused_add_rms_norm ------------------------------------------------------------
// ADD = false: out = weight * (x * inv_rms).to(dtype), x = input.
// ADD = true:  residual = (input + residual).to(dtype); input = weight * (r * inv_rms).to(dtype).
// Pass 1 accumulates sum(x^2) in float32; pass 2 writes. A thread's first vector of the row stays
// in registers from pass 1 and its weight vector is loaded before the PDL wait (no kernel writes
// the weight), so where a thread has one vector (hidden up to 1024 vectors: every shipped config)
// pass 2 loads nothing and the kernel does one round trip of loads after the wait, not two. Later
// vectors are re-read (from L1/L2): each thread re-reads exactly the elements it wrote in pass 1,
// so no barrier is needed between them.
template <typename scalar_t, int VEC, bool ADD>
__global__ void rms_norm_kernel(
    scalar_t* out,                        // [num_tokens, hidden] (row stride out_stride)
    const scalar_t* input,                // [num_tokens, hidden]; == out when ADD
    scalar_t* residual,                   // [num_tokens, hidden]; nullptr unless ADD
    const scalar_t* __restrict__ weight,  // [hidden]
    int64_t out_stride, int64_t in_stride, int64_t res_stride, int hidden, float eps) {
  using vec_t = Vec<scalar_t, VEC>;
  const int64_t t = blockIdx.x;
  const int num_vecs = hidden / VEC;
  const vec_t* x_row = reinterpret_cast<const vec_t*>(input + t * in_stride);
  vec_t* r_row = ADD ? reinterpret_cast<vec_t*>(residual + t * res_stride) : nullptr;
  vec_t* o_row = reinterpret_cast<vec_t*>(out + t * out_stride);
  const vec_t* w_row = reinterpret_cast<const vec_t*>(weight);
  const int first = threadIdx.x;  // this thread's first vector
  vec_t w_first{};
  if (first < num_vecs) w_first = w_row[first];
  // Issued after the load: with launch_dependents first, ptxas placed the load after the wait.
  pdl::launch_dependents();
  pdl::wait();

  float sum_sq = 0.f;
  vec_t x_first{};
  for (int i = first; i < num_vecs; i += blockDim.x) {
    vec_t x = x_row[i];
    if constexpr (ADD) {
      const vec_t r = r_row[i];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        x.v[j] = round_to<scalar_t>(static_cast<float>(x.v[j]) + static_cast<float>(r.v[j]));
      }
      r_row[i] = x;
    }
    if (i == first) x_first = x;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = static_cast<float>(x.v[j]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(hidden) + eps);

  for (int i = first; i < num_vecs; i += blockDim.x) {
    const vec_t x = i == first ? x_first : (ADD ? r_row[i] : x_row[i]);
    const vec_t w = i == first ? w_first : w_row[i];
    vec_t y;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float normed = static_cast<float>(round_to<scalar_t>(static_cast<float>(x.v[j]) * inv_rms));
      y.v[j] = round_to<scalar_t>(static_cast<float>(w.v[j]) * normed);
    }
    o_row[i] = y;
  }
}

template <bool ADD>
void launch_rms_norm(at::Tensor& out, const at::Tensor& input, at::Tensor* residual,
                     const at::Tensor& weight, double eps) {
  const int64_t num_tokens = input.size(0);
  if (num_tokens == 0) return;
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int hidden = static_cast<int>(input.size(1));
  VGRAPH_DISPATCH_FLOAT_TYPES(input.scalar_type(), "rms_norm_cuda", [&] {
    constexpr int kVec = 16 / sizeof(scalar_t);
    scalar_t* res_ptr = ADD ? residual->data_ptr<scalar_t>() : nullptr;
    const int64_t res_stride = ADD ? residual->stride(0) : 0;
    const bool vectorized = hidden % kVec == 0 && out.stride(0) % kVec == 0 &&
                            input.stride(0) % kVec == 0 && res_stride % kVec == 0 &&
                            aligned16(out.data_ptr()) && aligned16(input.data_ptr()) &&
                            aligned16(weight.data_ptr()) && (!ADD || aligned16(res_ptr));
    auto launch = [&](auto kernel, int vec) {
      launch_layer_kernel(kernel, num_tokens, threads_for(hidden / vec, 1024), stream,
                          out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), res_ptr,
                          weight.data_ptr<scalar_t>(), out.stride(0), input.stride(0), res_stride,
                          hidden, static_cast<float>(eps));
    };
    if (vectorized) {
      launch(rms_norm_kernel<scalar_t, kVec, ADD>, kVec);
    } else {
      launch(rms_norm_kernel<scalar_t, 1, ADD>, 1);
    }
  });
}

void rms_norm_cuda(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double eps) {
  check_rms_norm(out, input, weight);
  launch_rms_norm<false>(out, input, nullptr, weight, eps);
}

void fused_add_rms_norm_cuda(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                             double eps) {
  check_fused_add_rms_norm(input, residual, weight);
  launch_rms_norm<true>(input, input, &residual, weight, eps);
}

// ---- rotary_embedding -------------------------------------------------------------------------
// One item = VEC consecutive rotation pairs (x[i], x[i + half]) of one head of q or k.
template <int VEC>
__device__ __forceinline__ void load_floats(const float* p, float* dst) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int k = 0; k < VEC / 4; ++k) {
      const float4 f = reinterpret_cast<const float4*>(p)[k];
      dst[4 * k] = f.x, dst[4 * k + 1] = f.y, dst[4 * k + 2] = f.z, dst[4 * k + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) dst[k] = p[k];
  }
}

template <typename scalar_t, typename pos_t, int VEC>
__global__ void rotary_embedding_kernel(
    const pos_t* __restrict__ positions,  // [num_tokens]
    scalar_t* __restrict__ query,         // [num_tokens, num_heads * head_size] (row stride q_stride)
    scalar_t* __restrict__ key,           // [num_tokens, num_kv_heads * head_size] (row stride k_stride)
    const float* __restrict__ cos_sin_cache,  // [max_position, rot_dim]: cos | sin
    int64_t q_stride, int64_t k_stride, int rot_dim, int head_size, int num_heads,
    int num_kv_heads, int max_position) {
  // The token's position and the cos / sin of this thread's first item are read before the PDL
  // wait: the positions are the step's inputs, which a copy writes before the step's first kernel
  // (a copy is a full dependency of what follows it) and no kernel of the step writes, and no
  // kernel writes the cache. (Positions written by the kernel just before would need the wait:
  // only after it are that kernel's writes guaranteed visible.) After the wait one round trip
  // loads q / k, where the position and then cos / sin took two before it (every item is a
  // thread's first up to 512 items a token: every shipped config).
  using vec_t = Vec<scalar_t, VEC>;
  const int64_t t = blockIdx.x;
  const int64_t pos = static_cast<int64_t>(positions[t]);
  CUDA_KERNEL_ASSERT(pos >= 0 && pos < max_position);
  const int half = rot_dim / 2;
  const float* cos_row = cos_sin_cache + pos * rot_dim;
  const int chunks = half / VEC;  // items per head
  const int q_items = num_heads * chunks;
  const int items = (num_heads + num_kv_heads) * chunks;
  const int first = threadIdx.x;  // this thread's first item
  float cos_first[VEC], sin_first[VEC];
  if (first < items) {
    const int c = (first % chunks) * VEC;  // q items, then k items: heads of `chunks` items each
    load_floats<VEC>(cos_row + c, cos_first);
    load_floats<VEC>(cos_row + half + c, sin_first);
  }
  pdl::launch_dependents();
  pdl::wait();
  for (int i = first; i < items; i += blockDim.x) {
    const bool is_q = i < q_items;
    const int j = is_q ? i : i - q_items;
    const int head = j / chunks, c = (j - head * chunks) * VEC;
    scalar_t* x = (is_q ? query + t * q_stride : key + t * k_stride) + head * head_size + c;
    float cos[VEC], sin[VEC];
    if (i == first) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) cos[k] = cos_first[k], sin[k] = sin_first[k];
    } else {
      load_floats<VEC>(cos_row + c, cos);
      load_floats<VEC>(cos_row + half + c, sin);
    }
    vec_t a = *reinterpret_cast<const vec_t*>(x);
    vec_t b = *reinterpret_cast<const vec_t*>(x + half);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float x1 = static_cast<float>(a.v[k]), x2 = static_cast<float>(b.v[k]);
      a.v[k] = round_to<scalar_t>(x1 * cos[k] - x2 * sin[k]);
      b.v[k] = round_to<scalar_t>(x2 * cos[k] + x1 * sin[k]);
    }
    *reinterpret_cast<vec_t*>(x) = a;
    *reinterpret_cast<vec_t*>(x + half) = b;
  }
}

void rotary_embedding_cuda(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                           int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  const int64_t rot_dim =
      check_rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox);
  const int64_t num_tokens = query.size(0);
  if (num_tokens == 0) return;
  const c10::cuda::CUDAGuard guard(query.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int half = static_cast<int>(rot_dim / 2);
  const int num_heads = static_cast<int>(query.size(1) / head_size);
  const int num_kv_heads = static_cast<int>(key.size(1) / head_size);
  VGRAPH_DISPATCH_FLOAT_TYPES(query.scalar_type(), "rotary_embedding_cuda", [&] {
    constexpr int kVec = 16 / sizeof(scalar_t);  // 4 or 8: whole float4s of cos/sin
    const bool vectorized = half % kVec == 0 && head_size % kVec == 0 &&
                            query.stride(0) % kVec == 0 && key.stride(0) % kVec == 0 &&
                            aligned16(query.data_ptr()) && aligned16(key.data_ptr()) &&
                            aligned16(cos_sin_cache.data_ptr());
    auto launch = [&](auto kernel, int vec, auto* pos) {
      const int64_t items = (num_heads + num_kv_heads) * (half / vec);
      launch_layer_kernel(kernel, num_tokens, threads_for(items, 512), stream, pos,
                          query.data_ptr<scalar_t>(), key.data_ptr<scalar_t>(),
                          cos_sin_cache.data_ptr<float>(), query.stride(0), key.stride(0),
                          static_cast<int>(rot_dim), static_cast<int>(head_size), num_heads,
                          num_kv_heads, static_cast<int>(cos_sin_cache.size(0)));
    };
    auto dispatch_vec = [&](auto* pos) {
      using pos_t = std::remove_const_t<std::remove_pointer_t<decltype(pos)>>;
      if (vectorized) {
        launch(rotary_embedding_kernel<scalar_t, pos_t, kVec>, kVec, pos);
      } else {
        launch(rotary_embedding_kernel<scalar_t, pos_t, 1>, 1, pos);
      }
    };
    if (positions.scalar_type() == at::kLong) {
      dispatch_vec(positions.data_ptr<int64_t>());
    } else {
      dispatch_vec(positions.data_ptr<int32_t>());
    }
  });
}

// ---- rms_scale_rope (rms_norm_qkv_rope's unit-norm path, layers.h) ---------------------------
// One CTA per token. Items: VEC rotation pairs of one rope head (q, then k), then VEC values of
// the rest of the row (v; the whole row without rope). Before the PDL wait only the position and
// the cos / sin of the thread's first item (a step input and a constant, as in the rope kernel);
// after it one round trip loads the thread's first hidden vector and first item together, the
// CTA sums the squares, and every value is scaled, biased, rotated and rounded once (each
// thread's first vector and item stay in registers: up to 1,024 threads a token, every shipped
// config).
template <typename scalar_t, typename pos_t, int VEC>
__global__ void rms_scale_rope_kernel(
    scalar_t* __restrict__ qkv,            // [num_tokens, n] (row stride qkv_stride)
    const scalar_t* __restrict__ hidden,   // [num_tokens, k] (row stride hidden_stride)
    const scalar_t* __restrict__ bias,     // [n] or nullptr
    const pos_t* __restrict__ positions,   // [num_tokens] or nullptr (no rope)
    const float* __restrict__ cos_sin_cache,  // [max_position, head_size]: cos | sin
    int64_t qkv_stride, int64_t hidden_stride, int n, int k, int head_size, int rope_heads,
    int max_position, float eps) {
  using vec_t = Vec<scalar_t, VEC>;
  const int64_t t = blockIdx.x;
  const bool rope = positions != nullptr;
  const int half = head_size / 2, chunks = half / VEC;  // rope items a head
  const int rope_items = rope ? rope_heads * chunks : 0;
  const int rest = rope ? rope_heads * head_size : 0;  // the first value of the plain items
  const int items = rope_items + (n - rest) / VEC;
  // Item i: its first value and, for a rope item, its column of cos / sin.
  auto first_value = [&](int i) {
    if (i < rope_items) {
      const int head = i / chunks;
      return head * head_size + (i - head * chunks) * VEC;
    }
    return rest + (i - rope_items) * VEC;
  };
  const float* cos_row = nullptr;
  const int first = threadIdx.x;
  float cos_first[VEC], sin_first[VEC];
  if (rope) {
    const int64_t pos = static_cast<int64_t>(positions[t]);
    CUDA_KERNEL_ASSERT(pos >= 0 && pos < max_position);
    cos_row = cos_sin_cache + pos * head_size;
    if (first < rope_items) {
      const int c = (first % chunks) * VEC;
      load_floats<VEC>(cos_row + c, cos_first);
      load_floats<VEC>(cos_row + half + c, sin_first);
    }
  }
  pdl::launch_dependents();
  pdl::wait();

  scalar_t* row = qkv + t * qkv_stride;
  const vec_t* x_row = reinterpret_cast<const vec_t*>(hidden + t * hidden_stride);
  vec_t a_first{}, b_first{};
  if (first < items) {
    const int e = first_value(first);
    a_first = *reinterpret_cast<const vec_t*>(row + e);
    if (first < rope_items) b_first = *reinterpret_cast<const vec_t*>(row + e + half);
  }
  float sum_sq = 0.f;
  for (int i = first; i < k / VEC; i += blockDim.x) {
    const vec_t x = x_row[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = static_cast<float>(x.v[j]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(k) + eps);

  auto scaled = [&](const vec_t& v, int e, float (&y)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      y[j] = static_cast<float>(v.v[j]) * inv_rms + (bias ? static_cast<float>(bias[e + j]) : 0.f);
    }
  };
  for (int i = first; i < items; i += blockDim.x) {
    const int e = first_value(i);
    const vec_t a = i == first ? a_first : *reinterpret_cast<const vec_t*>(row + e);
    float y1[VEC];
    scaled(a, e, y1);
    vec_t out_a;
    if (i < rope_items) {
      const vec_t b = i == first ? b_first : *reinterpret_cast<const vec_t*>(row + e + half);
      float y2[VEC], cos[VEC], sin[VEC];
      scaled(b, e + half, y2);
      if (i == first) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) cos[j] = cos_first[j], sin[j] = sin_first[j];
      } else {
        const int c = (i % chunks) * VEC;
        load_floats<VEC>(cos_row + c, cos);
        load_floats<VEC>(cos_row + half + c, sin);
      }
      vec_t out_b;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        out_a.v[j] = round_to<scalar_t>(y1[j] * cos[j] - y2[j] * sin[j]);
        out_b.v[j] = round_to<scalar_t>(y2[j] * cos[j] + y1[j] * sin[j]);
      }
      *reinterpret_cast<vec_t*>(row + e + half) = out_b;
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) out_a.v[j] = round_to<scalar_t>(y1[j]);
    }
    *reinterpret_cast<vec_t*>(row + e) = out_a;
  }
}

void rms_scale_rope_cuda(at::Tensor& qkv, const at::Tensor& hidden, double eps,
                         const std::optional<at::Tensor>& bias,
                         const std::optional<at::Tensor>& positions,
                         const std::optional<at::Tensor>& cos_sin_cache, int64_t head_size,
                         int64_t num_heads, int64_t num_kv_heads) {
  const int64_t num_tokens = qkv.size(0);
  if (num_tokens == 0) return;
  const c10::cuda::CUDAGuard guard(qkv.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int n = static_cast<int>(qkv.size(1)), k = static_cast<int>(hidden.size(1));
  const int rope_heads = positions ? static_cast<int>(num_heads + num_kv_heads) : 0;
  const int half = static_cast<int>(head_size / 2);
  VGRAPH_DISPATCH_FLOAT_TYPES(qkv.scalar_type(), "rms_scale_rope_cuda", [&] {
    constexpr int kVec = 16 / sizeof(scalar_t);
    const scalar_t* b = bias ? bias->data_ptr<scalar_t>() : nullptr;
    const float* cache = cos_sin_cache ? cos_sin_cache->data_ptr<float>() : nullptr;
    const bool vectorized = (rope_heads == 0 || half % kVec == 0) && n % kVec == 0 &&
                            head_size % kVec == 0 && k % kVec == 0 && qkv.stride(0) % kVec == 0 &&
                            hidden.stride(0) % kVec == 0 && aligned16(qkv.data_ptr()) &&
                            aligned16(hidden.data_ptr()) && (b == nullptr || aligned16(b)) &&
                            (cache == nullptr || aligned16(cache));
    const int max_position = cos_sin_cache ? static_cast<int>(cos_sin_cache->size(0)) : 0;
    auto launch = [&](auto kernel, int vec, auto* pos) {
      const int64_t items = rope_heads * (half / vec) + (n - rope_heads * head_size) / vec;
      launch_layer_kernel(kernel, num_tokens, threads_for(std::max<int64_t>(items, k / vec), 1024),
                          stream, qkv.data_ptr<scalar_t>(), hidden.data_ptr<scalar_t>(), b, pos,
                          cache, qkv.stride(0), hidden.stride(0), n, k,
                          static_cast<int>(head_size), rope_heads, max_position,
                          static_cast<float>(eps));
    };
    auto dispatch_vec = [&](auto* pos) {
      using pos_t = std::remove_const_t<std::remove_pointer_t<decltype(pos)>>;
      if (vectorized) {
        launch(rms_scale_rope_kernel<scalar_t, pos_t, kVec>, kVec, pos);
      } else {
        launch(rms_scale_rope_kernel<scalar_t, pos_t, 1>, 1, pos);
      }
    };
    if (!positions) {
      dispatch_vec(static_cast<const int64_t*>(nullptr));
    } else if (positions->scalar_type() == at::kLong) {
      dispatch_vec(positions->data_ptr<int64_t>());
    } else {
      dispatch_vec(positions->data_ptr<int32_t>());
    }
  });
}

// ---- silu_and_mul -----------------------------------------------------------------------------
// out = silu(gate).to(dtype) * up, rounded where F.silu(gate) * up rounds (matches HF's bf16).
template <typename scalar_t, int VEC>
__global__ void silu_and_mul_kernel(
    scalar_t* __restrict__ out,          // [num_tokens, d] (row stride out_stride)
    const scalar_t* __restrict__ input,  // [num_tokens, 2 * d]: gate | up (row stride in_stride)
    int64_t out_stride, int64_t in_stride, int d) {
  pdl_prologue();
  using vec_t = Vec<scalar_t, VEC>;
  const int64_t t = blockIdx.x;
  const vec_t* gate = reinterpret_cast<const vec_t*>(input + t * in_stride);
  const vec_t* up = reinterpret_cast<const vec_t*>(input + t * in_stride + d);
  vec_t* o_row = reinterpret_cast<vec_t*>(out + t * out_stride);
  for (int i = threadIdx.x; i < d / VEC; i += blockDim.x) {
    const vec_t g = gate[i], u = up[i];
    vec_t y;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float x = static_cast<float>(g.v[k]);
      const float act = static_cast<float>(round_to<scalar_t>(x / (1.f + expf(-x))));
      y.v[k] = round_to<scalar_t>(act * static_cast<float>(u.v[k]));
    }
    o_row[i] = y;
  }
}

void silu_and_mul_cuda(at::Tensor& out, const at::Tensor& input) {
  check_silu_and_mul(out, input);
  const int64_t num_tokens = input.size(0);
  if (num_tokens == 0) return;
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int d = static_cast<int>(input.size(1) / 2);
  VGRAPH_DISPATCH_FLOAT_TYPES(input.scalar_type(), "silu_and_mul_cuda", [&] {
    constexpr int kVec = 16 / sizeof(scalar_t);
    const bool vectorized = d % kVec == 0 && input.stride(0) % kVec == 0 &&
                            out.stride(0) % kVec == 0 && aligned16(input.data_ptr()) &&
                            aligned16(out.data_ptr());
    auto launch = [&](auto kernel, int vec) {
      launch_layer_kernel(kernel, num_tokens, threads_for(d / vec, 1024), stream,
                          out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), out.stride(0),
                          input.stride(0), d);
    };
    if (vectorized) {
      launch(silu_and_mul_kernel<scalar_t, kVec>, kVec);
    } else {
      launch(silu_and_mul_kernel<scalar_t, 1>, 1);
    }
  });
}

// ---- embedding --------------------------------------------------------------------------------
// out[t] = weight[ids[t] - start] for ids in [start, end), else zeros: one CTA per token, 16-byte
// vectors where the width and pointers allow. (torch's index_select spends 11-14 us on a
// 16-token lookup on an H200: its small-index kernel walks the tokens serially.)
template <typename scalar_t, typename id_t, int VEC>
__global__ void embedding_kernel(
    scalar_t* __restrict__ out,           // [num_tokens, hidden] (row stride out_stride)
    const id_t* __restrict__ ids,         // [num_tokens]
    const scalar_t* __restrict__ weight,  // [rows, hidden]
    int64_t out_stride, int hidden, int64_t start, int64_t end, int64_t vocab_size) {
  pdl_prologue();
  using vec_t = Vec<scalar_t, VEC>;
  const int64_t t = blockIdx.x;
  const int64_t id = static_cast<int64_t>(ids[t]);
  CUDA_KERNEL_ASSERT(id >= 0 && id < vocab_size);
  vec_t* o_row = reinterpret_cast<vec_t*>(out + t * out_stride);
  const bool mine = id >= start && id < end;
  const vec_t* w_row = reinterpret_cast<const vec_t*>(weight + (mine ? id - start : 0) * hidden);
  vec_t zero;
#pragma unroll
  for (int k = 0; k < VEC; ++k) zero.v[k] = round_to<scalar_t>(0.f);
  for (int i = threadIdx.x; i < hidden / VEC; i += blockDim.x) o_row[i] = mine ? w_row[i] : zero;
}

void embedding_cuda(at::Tensor& out, const at::Tensor& ids, const at::Tensor& weight,
                    int64_t start, int64_t end, int64_t vocab_size) {
  check_embedding(out, ids, weight, start, end, vocab_size);
  const int64_t num_tokens = ids.size(0);
  if (num_tokens == 0) return;
  const c10::cuda::CUDAGuard guard(weight.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int hidden = static_cast<int>(weight.size(1));
  VGRAPH_DISPATCH_FLOAT_TYPES(weight.scalar_type(), "embedding_cuda", [&] {
    constexpr int kVec = 16 / sizeof(scalar_t);
    const bool vectorized = hidden % kVec == 0 && out.stride(0) % kVec == 0 &&
                            aligned16(out.data_ptr()) && aligned16(weight.data_ptr());
    auto launch = [&](auto kernel, int vec, auto* id) {
      launch_layer_kernel(kernel, num_tokens, threads_for(hidden / vec, 256), stream,
                          out.data_ptr<scalar_t>(), id, weight.data_ptr<scalar_t>(),
                          out.stride(0), hidden, start, end, vocab_size);
    };
    auto dispatch_vec = [&](auto* id) {
      using id_t = std::remove_const_t<std::remove_pointer_t<decltype(id)>>;
      if (vectorized) {
        launch(embedding_kernel<scalar_t, id_t, kVec>, kVec, id);
      } else {
        launch(embedding_kernel<scalar_t, id_t, 1>, 1, id);
      }
    };
    if (ids.scalar_type() == at::kLong) {
      dispatch_vec(ids.data_ptr<int64_t>());
    } else {
      dispatch_vec(ids.data_ptr<int32_t>());
    }
  });
}

}  // namespace

// For the fused decode ops' unfused path (layers.h).
void CudaOps::rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight,
                      double eps) {
  rms_norm_cuda(out, input, weight, eps);
}
void CudaOps::rotary_embedding(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                              int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox) {
  rotary_embedding_cuda(positions, query, key, head_size, cos_sin_cache, is_neox);
}
void CudaOps::silu_and_mul(at::Tensor& out, const at::Tensor& input) { silu_and_mul_cuda(out, input); }
void CudaOps::rms_scale_rope(at::Tensor& qkv, const at::Tensor& hidden, double eps,
                             const std::optional<at::Tensor>& bias,
                             const std::optional<at::Tensor>& positions,
                             const std::optional<at::Tensor>& cos_sin_cache, int64_t head_size,
                             int64_t num_heads, int64_t num_kv_heads) {
  rms_scale_rope_cuda(qkv, hidden, eps, bias, positions, cos_sin_cache, head_size, num_heads,
                      num_kv_heads);
}

}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CUDA, m) {
  m.impl("rms_norm", &vgraph::rms_norm_cuda);
  m.impl("fused_add_rms_norm", &vgraph::fused_add_rms_norm_cuda);
  m.impl("rotary_embedding", &vgraph::rotary_embedding_cuda);
  m.impl("silu_and_mul", &vgraph::silu_and_mul_cuda);
  m.impl("embedding", &vgraph::embedding_cuda);
}

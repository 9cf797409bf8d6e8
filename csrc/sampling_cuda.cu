// The sampler's CUDA ops. apply_logits_processors: every logits processor of a step (bans, the
// structured-output bitmask, allowed-token lists, logit_bias, presence / frequency / repetition
// penalties) in one kernel, one pass over the logits, instead of a dozen torch ops over [R, V]
// each. argmax_rows: the greedy token of each row (below).
//
// The host packs each row's entries (token id and kind, plus a value for logit_bias) into a CSR
// list (vgraph/sample/logits_processors.py); a CTA takes kChunk vocabulary entries of one row,
// gathers that row's entries falling into its chunk into shared memory (output-token counts,
// flags, bias), then rewrites its logits. Rows have at most a few thousand entries, so each CTA
// scanning all of its row's is cheaper than a second launch to sort them. An entry whose token
// lies outside the vocabulary falls in no chunk and changes nothing (the engine checks token ids
// against the vocabulary when a request arrives; the torch path raises on one).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "common.h"

namespace vgraph {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 2048;  // vocabulary entries per CTA
// Entry kinds: code = token_id << kKindBits | kind (vgraph/sample/logits_processors.py: Kind).
constexpr int kKindBits = 3;
constexpr int kOutput = 0, kPrompt = 1, kBias = 2, kBan = 3, kAllow = 4;
constexpr int kSeen = 1, kBanned = 2, kAllowed = 4;  // per-token flags
constexpr int kNumParams = 4;  // presence, frequency, repetition, restricted

__global__ void __launch_bounds__(kThreads) logits_processors_kernel(
    float* __restrict__ out, int64_t out_stride,             // [R, V]
    const float* __restrict__ logits, int64_t logits_stride,  // [R, V]
    const int32_t* __restrict__ bitmask, int64_t bitmask_stride,  // [R, ceil(V / 32)] or null
    const int32_t* __restrict__ row_ptr,  // [R + 1]
    const int32_t* __restrict__ codes,    // [N]
    const float* __restrict__ values,     // [N]
    const float* __restrict__ params,     // [R, kNumParams]
    int vocab) {
  __shared__ int counts[kChunk];
  __shared__ int flags[kChunk];
  __shared__ float bias[kChunk];
  const int row = blockIdx.y;
  const int c0 = blockIdx.x * kChunk;
  for (int i = threadIdx.x; i < kChunk; i += kThreads) {
    counts[i] = 0;
    flags[i] = 0;
    bias[i] = 0.f;
  }
  __syncthreads();
  const int end = row_ptr[row + 1];
  for (int e = row_ptr[row] + threadIdx.x; e < end; e += kThreads) {
    const int code = codes[e];
    const int local = (code >> kKindBits) - c0;
    if (local < 0 || local >= kChunk) continue;
    switch (code & ((1 << kKindBits) - 1)) {
      case kOutput: atomicAdd(&counts[local], 1); break;
      case kPrompt: atomicOr(&flags[local], kSeen); break;
      case kBias: atomicAdd(&bias[local], values[e]); break;
      case kBan: atomicOr(&flags[local], kBanned); break;
      case kAllow: atomicOr(&flags[local], kAllowed); break;
      default: break;
    }
  }
  __syncthreads();
  const float* p = params + static_cast<int64_t>(row) * kNumParams;
  const float presence = p[0], frequency = p[1], repetition = p[2];
  const bool restricted = p[3] != 0.f;
  const float* in = logits + row * logits_stride;
  float* o = out + row * out_stride;
  const int32_t* mask = bitmask == nullptr ? nullptr : bitmask + row * bitmask_stride;
  const int n = min(kChunk, vocab - c0);
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int t = c0 + i;
    const int f = flags[i];
    const int c = counts[i];
    // the order of the torch path: masks, then bias, then the penalties
    bool masked = (f & kBanned) != 0 || (restricted && (f & kAllowed) == 0);
    if (mask != nullptr) masked = masked || ((mask[t >> 5] >> (t & 31)) & 1) == 0;
    float x = masked ? -INFINITY : in[t];
    x += bias[i];
    if ((f & kSeen) != 0 || c > 0) x = x > 0.f ? x / repetition : x * repetition;
    x -= frequency * static_cast<float>(c);
    x -= c > 0 ? presence : 0.f;
    o[t] = x;
  }
}

void apply_logits_processors_cuda(at::Tensor& out, const at::Tensor& logits,
                                  const std::optional<at::Tensor>& bitmask,
                                  const at::Tensor& row_ptr, const at::Tensor& codes,
                                  const at::Tensor& values, const at::Tensor& params) {
  check_logits_processors(out, logits, bitmask, row_ptr, codes, values, params);
  const int64_t num_rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  if (num_rows == 0 || vocab == 0) return;
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const dim3 grid((vocab + kChunk - 1) / kChunk, num_rows);
  logits_processors_kernel<<<grid, kThreads, 0, stream>>>(
      out.data_ptr<float>(), out.stride(0), logits.data_ptr<float>(), logits.stride(0),
      bitmask ? bitmask->data_ptr<int32_t>() : nullptr, bitmask ? bitmask->stride(0) : 0,
      row_ptr.data_ptr<int32_t>(), codes.data_ptr<int32_t>(), values.data_ptr<float>(),
      params.data_ptr<float>(), static_cast<int>(vocab));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- argmax_rows: greedy tokens -----------------------------------------------------------------
// One CTA per row: each thread scans its strided share in ascending index order (16-byte loads
// when the row allows), then a warp-shuffle and a shared-memory round pick the row's winner.
// torch's argmax reduces a 49,152-entry row in about 13 us and a 128,256-entry row in about 28 us
// on the H200 (benchmarks/results/2026-12-01-h200-decode-append/); one CTA streams them in a few.
constexpr int kArgmaxThreads = 1024;

// Whether (v, i) comes before (best_v, best_i) in torch.argmax's order.
__device__ __forceinline__ bool argmax_before(float v, int i, float best_v, int best_i) {
  const bool nan = isnan(v), best_nan = isnan(best_v);
  if (nan != best_nan) return nan;
  if (!nan && v != best_v) return v > best_v;
  return i < best_i;
}

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_rows_kernel(int64_t* __restrict__ out, const float* __restrict__ logits,
                       int64_t stride, int vocab, bool vec4) {
  const float* x = logits + blockIdx.x * stride;
  float best_v = -INFINITY;
  int best_i = INT_MAX;
  auto take = [&](float v, int i) {
    if (argmax_before(v, i, best_v, best_i)) best_v = v, best_i = i;
  };
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
    for (int j = threadIdx.x; j < vocab / 4; j += kArgmaxThreads) {
      const float4 f = __ldg(x4 + j);
      take(f.x, 4 * j), take(f.y, 4 * j + 1), take(f.z, 4 * j + 2), take(f.w, 4 * j + 3);
    }
  } else {
#pragma unroll 4
    for (int j = threadIdx.x; j < vocab; j += kArgmaxThreads) take(__ldg(x + j), j);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best_v, off);
    const int i = __shfl_xor_sync(0xffffffffu, best_i, off);
    take(v, i);
  }
  __shared__ float s_v[kArgmaxThreads / 32];
  __shared__ int s_i[kArgmaxThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s_v[warp] = best_v, s_i[warp] = best_i;
  __syncthreads();
  if (warp != 0) return;
  best_v = s_v[lane], best_i = s_i[lane];  // 32 warps: one entry per lane
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best_v, off);
    const int i = __shfl_xor_sync(0xffffffffu, best_i, off);
    take(v, i);
  }
  if (lane == 0) out[blockIdx.x] = best_i;
}

void argmax_rows_cuda(at::Tensor& out, const at::Tensor& logits) {
  check_argmax_rows(out, logits);
  const int64_t num_rows = logits.size(0);
  if (num_rows == 0) return;
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int vocab = static_cast<int>(logits.size(1));
  const bool vec4 = vocab % 4 == 0 && logits.stride(0) % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(logits.data_ptr()) % 16 == 0;
  argmax_rows_kernel<<<num_rows, kArgmaxThreads, 0, stream>>>(
      out.data_ptr<int64_t>(), logits.data_ptr<float>(), logits.stride(0), vocab, vec4);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace
}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CUDA, m) {
  m.impl("apply_logits_processors", &vgraph::apply_logits_processors_cuda);
  m.impl("argmax_rows", &vgraph::argmax_rows_cuda);
}

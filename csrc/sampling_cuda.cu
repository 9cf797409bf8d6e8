// The sampler's CUDA ops. apply_logits_processors: every logits processor of a step (bans, the
// structured-output bitmask, allowed-token lists, logit_bias, presence / frequency / repetition
// penalties) in one kernel, one pass over the logits, instead of a dozen torch ops over [R, V]
// each. argmax_rows: the greedy token of each row, a cluster of CTAs per row (below).
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

#include <cooperative_groups.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "argmax.h"
#include "common.h"
#include "device_info.cuh"
#include "greedy_key.cuh"
#include "pdl.cuh"

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
// A row is cut into `parts` slices, one CTA each, the CTAs of a row forming one thread-block
// cluster: each thread scans its strided share of its slice (four entries a load when the row
// allows; float32 or 16-bit logits, the 16-bit ones optionally stored widened in the same pass),
// a warp-shuffle and a shared-memory round pick the CTA's winner, and the row's first CTA reads
// the others' winners from their shared memory (distributed shared memory, after a cluster
// barrier) and writes the row's. The comparison is a total order, so the result does not depend
// on how the row is cut. A single CTA scanning a row waits on one round trip per 16 KiB it
// streams; a row's CTAs run their round trips side by side. At one row, torch's argmax takes
// about 13 us for 49,152 entries, 28 us for 128,256 and 10 us for 151,936 on the H200, this kernel
// 4.6, 5.5 and 5.4 us (argmax_parts).
// With a state (the LM head ops' greedy_state: a zeroed [key, count] pair of int64 a row) and
// VGRAPH_ARGMAX_ATOMIC=1 the row's CTAs form no cluster: CTAs of kArgmaxAtomicThreads threads,
// one per 4,096 entries, each put their winner's key (greedy_key) into the row's key with a
// global atomic max and count themselves done; the row's last CTA writes the row's index and
// zeroes the pair. No cluster launch, no cluster barriers, and four times the CTAs for the same
// row: Llama-3.2-1B's head took 5.3 us (one row) and 8.4 (16 rows) of exclusive time with the
// clusters. Default off: within the spread on an H100 (Llama-3.2-1B's step 1.357 against 1.366
// ms at 16 tokens, 1.060 against 1.057 at one; benchmarks/results/2026-12-05-h200-fold-argmax/).
constexpr int kArgmaxThreads = 1024;
constexpr int kArgmaxAtomicThreads = 256;
constexpr int kArgmaxMaxParts = 8;          // the portable cluster size
constexpr int kArgmaxPerThread = 16;        // entries a thread scans before a row gets another CTA

// Whether (v, i) comes before (best_v, best_i) in torch.argmax's order.
__device__ __forceinline__ bool argmax_before(float v, int i, float best_v, int best_i) {
  const bool nan = isnan(v), best_nan = isnan(best_v);
  if (nan != best_nan) return nan;
  if (!nan && v != best_v) return v > best_v;
  return i < best_i;
}

struct ArgmaxBest {
  float v = -INFINITY;
  int i = INT_MAX;
  __device__ __forceinline__ void take(float v2, int i2) {
    if (argmax_before(v2, i2, v, i)) v = v2, i = i2;
  }
  __device__ __forceinline__ void warp_reduce() {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float v2 = __shfl_xor_sync(0xffffffffu, v, off);
      const int i2 = __shfl_xor_sync(0xffffffffu, i, off);
      take(v2, i2);
    }
  }
};

// Four entries of a row as floats: one 16-byte (float) or 8-byte (16-bit) load.
template <typename TIn>
struct Quad;
template <>
struct Quad<float> {
  using Vec = float4;
};
template <>
struct Quad<c10::Half> {
  using Vec = uint2;
};
template <>
struct Quad<c10::BFloat16> {
  using Vec = uint2;
};

template <typename TIn>
__device__ __forceinline__ void load_quad(const TIn* p, float (&f)[4]) {
  using Vec = typename Quad<TIn>::Vec;
  const Vec v = __ldg(reinterpret_cast<const Vec*>(p));
  const TIn* e = reinterpret_cast<const TIn*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = static_cast<float>(e[i]);
}

// Grid (num_rows, parts); with parts > 1 and no state, launched as clusters of (1, parts, 1): a
// row's CTAs. With `widened` (kWiden) each entry is also stored there as float32, in the same
// pass. THREADS: kArgmaxThreads (clusters) or kArgmaxAtomicThreads (state).
template <typename TIn, bool kWiden, int THREADS>
__global__ void __launch_bounds__(THREADS)
    argmax_rows_kernel(int64_t* __restrict__ out, const TIn* __restrict__ logits, int64_t stride,
                       int vocab, bool vec4, float* __restrict__ widened, int64_t widened_stride,
                       unsigned long long* __restrict__ state) {
  pdl::wait();  // launched with PDL: the logits are the previous kernel's (the LM head's)
  const int row = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  const TIn* x = logits + row * stride;
  float* w = kWiden ? widened + row * widened_stride : nullptr;
  const int unit = vec4 ? 4 : 1;  // vec4: vocab % 4 == 0
  const int units = vocab / unit, per = (units + parts - 1) / parts;
  const int begin = part * per, end = min(units, begin + per);
  ArgmaxBest best;
  if (vec4) {
#pragma unroll 4
    for (int j = begin + threadIdx.x; j < end; j += THREADS) {
      float f[4];
      load_quad(x + 4 * j, f);
      if constexpr (kWiden) {
        *reinterpret_cast<float4*>(w + 4 * j) = make_float4(f[0], f[1], f[2], f[3]);
      }
      best.take(f[0], 4 * j), best.take(f[1], 4 * j + 1), best.take(f[2], 4 * j + 2);
      best.take(f[3], 4 * j + 3);
    }
  } else {
#pragma unroll 4
    for (int j = begin + threadIdx.x; j < end; j += THREADS) {
      const float f = static_cast<float>(x[j]);
      if constexpr (kWiden) w[j] = f;
      best.take(f, j);
    }
  }
  best.warp_reduce();
  constexpr int kWarps = THREADS / 32;
  __shared__ float s_v[kWarps];
  __shared__ int s_i[kWarps];
  __shared__ float s_cta_v;  // this CTA's winner, read by the row's first CTA
  __shared__ int s_cta_i;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s_v[warp] = best.v, s_i[warp] = best.i;
  __syncthreads();
  if (warp == 0) {
    best = ArgmaxBest();
    if (lane < kWarps) best.v = s_v[lane], best.i = s_i[lane];  // one entry per lane
    best.warp_reduce();
    if (lane == 0 && parts == 1) out[row] = best.i;
    if (lane == 0) s_cta_v = best.v, s_cta_i = best.i;
    if (lane == 0 && parts > 1 && state != nullptr) {  // the atomic finish (no cluster)
      unsigned long long* key = state + 2 * row;
      atomicMax(key, greedy_key(best.v, best.i));
      __threadfence();  // the max is visible before this CTA counts itself done
      const unsigned int done = atomicAdd(reinterpret_cast<unsigned int*>(key + 1), 1u);
      if (done == static_cast<unsigned int>(parts - 1)) {
        out[row] = greedy_index(atomicExch(key, 0ull));
        atomicExch(key + 1, 0ull);
      }
    }
  }
  if (parts == 1 || state != nullptr) return;  // uniform over the grid: no cluster
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // the host launches parts > 1 on sm_90+ only
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();  // every CTA's winner is written
  if (part == 0 && warp == 0) {
    ArgmaxBest b;
    if (lane < parts) {
      b.v = *cluster.map_shared_rank(&s_cta_v, lane);
      b.i = *cluster.map_shared_rank(&s_cta_i, lane);
    }
    b.warp_reduce();
    if (lane == 0) out[row] = b.i;
  }
  cluster.sync();  // the peers' shared memory stays until the first CTA has read it
#endif
}

// CTAs a row is cut into: one per kArgmaxThreads * kArgmaxPerThread entries, at most a cluster's
// worth, while the rows' CTAs fit one per SM; else (and before sm_90: no clusters) one. H200,
// us per call (benchmarks/results/2026-12-03-h200-attn-groups/, call 4), one CTA a row against
// the cluster: 128,256 entries 11.2 / 5.5 at one row, 14.2 / 9.2 at 16; at 64 rows (512 CTAs of
// 8) 15.7 / 22.4, and likewise for 49,152 and 151,936 entries. VGRAPH_ARGMAX_PARTS (1 to 8, for
// measurements) sets it, read at each launch (a graph keeps the value it was captured with).
int argmax_parts(int vocab, int64_t num_rows, const at::Tensor& logits) {
  if (compute_major(logits.get_device()) < 9) return 1;  // no clusters
  const int forced = env_int("VGRAPH_ARGMAX_PARTS", 0, 1, kArgmaxMaxParts);
  if (forced > 0) return forced;
  constexpr int kPerCta = kArgmaxThreads * kArgmaxPerThread;
  const int parts = std::min(kArgmaxMaxParts, (vocab + kPerCta - 1) / kPerCta);
  return num_rows * parts <= num_sms(logits.get_device()) ? parts : 1;
}

// CTAs a row is cut into with a state: one per kArgmaxAtomicThreads * kArgmaxPerThread entries.
int argmax_atomic_parts(int vocab) {
  constexpr int kPerCta = kArgmaxAtomicThreads * kArgmaxPerThread;
  return std::max(1, (vocab + kPerCta - 1) / kPerCta);
}

template <typename TIn, bool kWiden>
void launch_argmax(const at::Tensor& out, const at::Tensor& logits, float* widened,
                   int64_t widened_stride, bool vec4, int parts, unsigned long long* state,
                   cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(logits.size(0)), parts);
  cfg.blockDim = dim3(state != nullptr ? kArgmaxAtomicThreads : kArgmaxThreads);
  cfg.stream = stream;
  // Programmatic stream serialization (pdl.cuh): the CTAs may start while the LM head's last CTAs
  // run, instead of after a kernel boundary. VGRAPH_ARGMAX_PDL=0 launches plainly (comparisons;
  // read at each launch, so a graph keeps what it was captured with).
  cudaLaunchAttribute attr[2];
  cfg.attrs = attr;
  cfg.numAttrs = 0;
  if (pdl::enabled() && env_int("VGRAPH_ARGMAX_PDL", 1, 0, 1) == 1) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (parts > 1 && state == nullptr) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs].val.clusterDim.x = 1;
    attr[cfg.numAttrs].val.clusterDim.y = parts;
    attr[cfg.numAttrs++].val.clusterDim.z = 1;
  }
  auto kernel = state != nullptr ? argmax_rows_kernel<TIn, kWiden, kArgmaxAtomicThreads>
                                 : argmax_rows_kernel<TIn, kWiden, kArgmaxThreads>;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, out.data_ptr<int64_t>(),
                                    static_cast<const TIn*>(logits.data_ptr()),
                                    static_cast<int64_t>(logits.stride(0)),
                                    static_cast<int>(logits.size(1)), vec4, widened,
                                    widened_stride, state));
}

void argmax_rows_cuda(at::Tensor& out, const at::Tensor& logits) {
  check_argmax_rows(out, logits);
  launch_argmax_rows(out, logits, nullptr, nullptr);
}

}  // namespace

void launch_argmax_rows(const at::Tensor& out, const at::Tensor& logits, const at::Tensor* widened,
                        const at::Tensor* state) {
  const int64_t num_rows = logits.size(0);
  if (num_rows == 0) return;
  TORCH_CHECK(num_rows < (1LL << 31), "argmax_rows: at most 2^31 - 1 rows, got ", num_rows);
  if (widened != nullptr) {
    TORCH_CHECK(widened->scalar_type() == at::kFloat && widened->sizes() == logits.sizes() &&
                    widened->stride(1) == 1 && widened->device() == logits.device(),
                "widened logits must be float32 ", logits.sizes(), " with contiguous rows, got ",
                widened->scalar_type(), " ", widened->sizes());
  }
  const c10::cuda::CUDAGuard guard(logits.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int vocab = static_cast<int>(logits.size(1));
  const int64_t quad_bytes = 4 * static_cast<int64_t>(logits.element_size());
  bool vec4 = vocab % 4 == 0 && logits.stride(0) % 4 == 0 &&
              reinterpret_cast<uintptr_t>(logits.data_ptr()) % quad_bytes == 0;
  float* w = nullptr;
  int64_t w_stride = 0;
  if (widened != nullptr) {
    w = widened->data_ptr<float>();
    w_stride = widened->stride(0);
    vec4 = vec4 && w_stride % 4 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  }
  // The atomic finish where a state with a pair for every row is given and VGRAPH_ARGMAX_ATOMIC=1
  // (read at each launch, so a graph keeps what it was captured with).
  unsigned long long* st = nullptr;
  if (state != nullptr && state->size(0) >= 2 * num_rows &&
      env_int("VGRAPH_ARGMAX_ATOMIC", 0, 0, 1) == 1) {
    st = reinterpret_cast<unsigned long long*>(state->data_ptr<int64_t>());
  }
  const int parts =
      st != nullptr ? argmax_atomic_parts(vocab) : argmax_parts(vocab, num_rows, logits);
  auto run = [&](auto tag) {
    using TIn = decltype(tag);
    if (w != nullptr) {
      launch_argmax<TIn, true>(out, logits, w, w_stride, vec4, parts, st, stream);
    } else {
      launch_argmax<TIn, false>(out, logits, nullptr, 0, vec4, parts, st, stream);
    }
  };
  switch (logits.scalar_type()) {
    case at::kFloat:
      TORCH_CHECK(w == nullptr, "float32 logits need no widening");
      return run(float{});
    case at::kHalf: return run(c10::Half{});
    case at::kBFloat16: return run(c10::BFloat16{});
    default:
      TORCH_CHECK(false, "logits must be float32, float16 or bfloat16, got ",
                  logits.scalar_type());
  }
}

}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CUDA, m) {
  m.impl("apply_logits_processors", &vgraph::apply_logits_processors_cuda);
  m.impl("argmax_rows", &vgraph::argmax_rows_cuda);
}

// Definitions of the GEMV kernel declared in decode_gemv.h (see decode_cuda.cu for its design).
// Included by the decode_gemv_*.cu files, each instantiating one epilogue, and by decode_mlp.cu
// for the shared device helpers (16-bit packing, warp sums, the weights' L2 policy).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include <c10/cuda/CUDAException.h>
#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "common.h"
#include "cp_async.cuh"
#include "decode_gemv.h"
#include "device_info.cuh"
#include "greedy_key.cuh"
#include "pdl.cuh"

namespace vgraph {
namespace gemv {

// ---- PTX helpers (sm_90) -----------------------------------------------------------------------
// The L2 cache policy of the weight loads: evict-first where GemvArgs::l2_evict_first (weights are
// read once a step; the lines they bring in go before the KV cache's and the activations'), else
// evict-normal, the unhinted loads' priority.
__device__ __forceinline__ uint64_t weight_policy(bool evict_first) {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (evict_first) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  }
#endif
  return policy;
}

// Weights are streamed once: read-only path, no L1 allocation, the L2 policy above. Volatile keeps
// it before the wait.
__device__ __forceinline__ uint4 load_stream(const uint4* p, uint64_t policy) {
  uint4 v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
#else
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
#endif
  return v;
}

// ---- 16-bit <-> float, two at a time -----------------------------------------------------------
template <typename T>
struct Pack;

template <>
struct Pack<c10::BFloat16> {
  static __device__ __forceinline__ float2 unpack(uint32_t w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  }
  // Both rounded to bfloat16 (nearest even) and packed, the first in the low half.
  static __device__ __forceinline__ uint32_t pack(float2 f) {
    const __nv_bfloat162 h = __float22bfloat162_rn(f);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  // a * b per half, rounded once: the product of two bfloat16 is exact in float32, so this is
  // pack(unpack(a) * unpack(b)) in one instruction.
  static __device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b) {
    const __nv_bfloat162 h = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                     *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

template <>
struct Pack<c10::Half> {
  static __device__ __forceinline__ float2 unpack(uint32_t w) {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
  }
  static __device__ __forceinline__ uint32_t pack(float2 f) {
    const __half2 h = __float22half2_rn(f);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b) {  // as bfloat16's
    const __half2 h = __hmul2(*reinterpret_cast<const __half2*>(&a),
                              *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  const float2 a = Pack<T>::unpack(v.x), b = Pack<T>::unpack(v.y);
  const float2 c = Pack<T>::unpack(v.z), d = Pack<T>::unpack(v.w);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

// RMSNorm's values of 8 elements, packed: weight * (x * inv_rms).to(dtype), rounded (its rounding
// points; the weight's product in the dtype's packed multiply, exact before its one rounding).
template <typename T>
__device__ __forceinline__ uint4 norm8(const uint4& x, const uint4& weight, float inv_rms) {
  float f[8];
  unpack8<T>(x, f);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&weight);
  uint4 out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int i = 0; i < 8; i += 2) {
    o[i / 2] =
        Pack<T>::mul2(w[i / 2], Pack<T>::pack(make_float2(f[i] * inv_rms, f[i + 1] * inv_rms)));
  }
  return out;
}

// weight * x for 8 elements, each product rounded once (the scaled sums: GemvArgs::norm_scaled).
template <typename T>
__device__ __forceinline__ uint4 mul8(const uint4& x, const uint4& weight) {
  return make_uint4(Pack<T>::mul2(weight.x, x.x), Pack<T>::mul2(weight.y, x.y),
                    Pack<T>::mul2(weight.z, x.z), Pack<T>::mul2(weight.w, x.w));
}

// sum += x * x over 8 elements.
template <typename T>
__device__ __forceinline__ float add_squares8(const uint4& x, float sum) {
  float f[8];
  unpack8<T>(x, f);
#pragma unroll
  for (int i = 0; i < 8; ++i) sum = fmaf(f[i], f[i], sum);
  return sum;
}

template <typename T>
__device__ __forceinline__ float round1(float v) {
  return static_cast<float>(static_cast<T>(v));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// ---- epilogue ---------------------------------------------------------------------------------
// What the epilogue of one token's row pair reads besides its two sums, loaded early so the
// epilogue itself is arithmetic and stores only.
struct EpiIn {
  float b0 = 0.f, b1 = 0.f;  // kQkvRope: the rows' bias (read only when a.bias is set)
  float c = 1.f, s = 0.f;    // kQkvRope: cos and sin of the pair at the token's position
  bool rope = false;         // kQkvRope: the pair belongs to a rotated head
  float r0 = 0.f, r1 = 0.f;  // kAddResidual: the residual's values at the two rows
};

// Before the PDL wait: the step constants (the bias is a weight; the positions are a step input,
// copied to the device before the step's first kernel and written by no kernel of the step, so
// the cos / sin rows they select can be read while the previous kernel runs).
template <typename T, Epilogue E>
__device__ __forceinline__ void epi_before_wait(const GemvArgs<T>& a, int m, int row0, int row1,
                                                EpiIn& in) {
  if constexpr (E == Epilogue::kQkvRope) {
    if (a.bias != nullptr) {
      in.b0 = static_cast<float>(a.bias[row0]);
      in.b1 = static_cast<float>(a.bias[row1]);
    }
    const int head = row0 / a.head_size, j = row0 - head * a.head_size;
    in.rope = a.cos_sin != nullptr && head < a.rope_heads;
    if (in.rope) {
      const int64_t pos = a.pos64 ? a.pos64[m] : static_cast<int64_t>(a.pos32[m]);
      CUDA_KERNEL_ASSERT(pos >= 0 && pos < a.max_position);
      in.c = a.cos_sin[pos * a.head_size + j];
      in.s = a.cos_sin[pos * a.head_size + a.head_size / 2 + j];
    }
  }
}

// Right after the wait: the residual rows, written by earlier kernels of the step; loaded with
// the activations rather than after the reduction.
template <typename T, Epilogue E>
__device__ __forceinline__ void epi_after_wait(const GemvArgs<T>& a, int m, int row0, int row1,
                                               bool valid0, bool valid1, EpiIn& in) {
  if constexpr (E == Epilogue::kAddResidual) {
    const T* res = a.residual + m * a.res_stride;
    if (valid0) in.r0 = static_cast<float>(res[row0]);
    if (valid1) in.r1 = static_cast<float>(res[row1]);
  }
}

// Token m's results y0, y1 of output rows row0, row1 (the CTA's row pair: gate i and up i for
// kSiluMul, rotate-half partners for kQkvRope; any two rows otherwise, each written only if valid).
// Both kernels end here, so their numerics differ only in the fp32 summation order.
template <typename T, Epilogue E>
__device__ __forceinline__ void write_pair(const GemvArgs<T>& a, int m, int row0, int row1,
                                           bool valid0, bool valid1, float y0, float y1,
                                           const EpiIn& in) {
  if constexpr (E == Epilogue::kStore || E == Epilogue::kNormStore) {
    if (a.out_float) {
      float* o = static_cast<float*>(a.out) + m * a.out_stride;
      if (valid0) o[row0] = round1<T>(y0);
      if (valid1) o[row1] = round1<T>(y1);
    } else {
      T* o = static_cast<T*>(a.out) + m * a.out_stride;
      if (valid0) o[row0] = static_cast<T>(y0);
      if (valid1) o[row1] = static_cast<T>(y1);
    }
  } else if constexpr (E == Epilogue::kAddResidual) {
    T* res = a.residual + m * a.res_stride;
    if (valid0) res[row0] = static_cast<T>(round1<T>(y0) + in.r0);
    if (valid1) res[row1] = static_cast<T>(round1<T>(y1) + in.r1);
  } else if constexpr (E == Epilogue::kSiluMul) {
    const float g = round1<T>(y0), u = round1<T>(y1);
    const float act = round1<T>(g / (1.f + expf(-g)));
    static_cast<T*>(a.out)[m * a.out_stride + row0] = static_cast<T>(act * u);
  } else {  // kQkvRope
    y0 = a.bias ? y0 + in.b0 : y0;
    y1 = a.bias ? y1 + in.b1 : y1;
    y0 = round1<T>(y0), y1 = round1<T>(y1);
    if (in.rope) {
      const float r0 = y0 * in.c - y1 * in.s, r1 = y1 * in.c + y0 * in.s;
      y0 = r0, y1 = r1;
    }
    T* o = static_cast<T*>(a.out) + m * a.out_stride;
    o[row0] = static_cast<T>(y0);
    o[row1] = static_cast<T>(y1);
  }
}

// ---- greedy epilogue (the looping kernel's kStore / kNormStore with GemvArgs::greedy) ------------
// Keys: greedy_key (greedy_key.cuh), a stored value and its row.

// The best key of a token's row pair: the stored values (rounded to T) of its valid rows.
template <typename T>
__device__ __forceinline__ unsigned long long greedy_pair_key(int row0, int row1, bool valid1,
                                                              float y0, float y1) {
  const unsigned long long k0 = greedy_key(round1<T>(y0), row0);
  const unsigned long long k1 = valid1 ? greedy_key(round1<T>(y1), row1) : 0ull;
  return k0 > k1 ? k0 : k1;
}

// Called by every thread of the looping kernel's CTA once, after its stores (one token): `key` is
// the best key of this thread's pairs (0 but for a pair's first thread). The CTA's best goes into
// the launch's state (a global atomic max), then the CTA counts itself done; the last CTA reads
// the winner, writes the greedy row and zeroes the state for the next launch. The looping grid
// has at most as many CTAs as fit the GPU: a CTA per row pair (tens of thousands for a large
// vocabulary) queues that many atomics on two addresses (Llama-3.2-1B's head took 209 against 133
// us a call so, 2026-12-04-h200-head-greedy call 1), and there the op runs an argmax after it.
__device__ __forceinline__ void greedy_finish(int64_t* greedy, unsigned long long* state,
                                              int pairs_per_cta, int sub, int tid,
                                              unsigned long long key) {
  __shared__ unsigned long long s_key[kThreads / 32];  // [pair slot]
  __shared__ bool s_last;
  if (tid == 0) s_key[sub] = key;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long best = 0ull;
    for (int p = 0; p < pairs_per_cta; ++p) best = max(best, s_key[p]);
    atomicMax(state, best);
    __threadfence();  // the max is visible before this CTA counts itself done
    const unsigned int done = atomicAdd(reinterpret_cast<unsigned int*>(state + 1), 1u);
    s_last = done == gridDim.x - 1;
  }
  __syncthreads();
  if (threadIdx.x == 0 && s_last) {
    const unsigned long long k = atomicExch(state, 0ull);
    *greedy = greedy_index(k);
    atomicExch(state + 1, 0ull);
  }
}

// The output rows of row pair `pair`: gate i and up i for kSiluMul, rotate-half partners for
// kQkvRope, two consecutive rows otherwise (the second may be past an odd N).
template <typename T, Epilogue E>
__device__ __forceinline__ void pair_rows(const GemvArgs<T>& a, int pair, int (&row)[kRows]) {
  if constexpr (E == Epilogue::kSiluMul) {
    row[0] = pair, row[1] = pair + a.N / 2;  // gate i, up i
  } else if constexpr (E == Epilogue::kQkvRope) {
    const int half = a.head_size / 2, head = pair / half, j = pair - head * half;
    row[0] = head * a.head_size + j, row[1] = row[0] + half;  // rotate-half partners
  } else {
    row[0] = pair * kRows, row[1] = row[0] + 1;
  }
}

// A thread's kPreload weight vectors of both rows, at k = first + v * stride (zero past K).
__device__ __forceinline__ void load_weights(const uint4* const (&w_row)[kRows], int first,
                                             int stride, int num_vecs, uint64_t policy,
                                             uint4 (&w)[kRows][kPreload]) {
#pragma unroll
  for (int v = 0; v < kPreload; ++v) {
    const int k = first + v * stride;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      w[r][v] = k < num_vecs ? load_stream(w_row[r] + k, policy) : uint4{};
    }
  }
}

// The norm weight's vectors of a thread's first chunk (k = v * nt + tid), copied to its own slots
// s_nw[v * nt + tid] by cp.async (no registers held, no stall; only this thread reads them, after
// its cp_async_wait).
template <typename T>
__device__ __forceinline__ void stage_norm_weight(const T* norm_weight, uint4* s_nw, int tid,
                                                  int nt, int num_vecs) {
#pragma unroll
  for (int v = 0; v < kPreload; ++v) {
    const int k = v * nt + tid;
    if (k < num_vecs) cp_async16(&s_nw[v * nt + tid], norm_weight + k * 8);
  }
  cp_async_commit();
}

// ---- the kernel --------------------------------------------------------------------------------
template <typename T, int MT, Epilogue E>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const GemvArgs<T> a) {
  constexpr int VEC = 8;  // 16 bytes of a 16-bit dtype
  constexpr bool kNorm = has_norm(E);
  // A CTA takes a.pairs_per_cta row pairs, each on nt threads (whole warps) of its own: below,
  // tid / warp / num_warps are within the pair's threads, cta_warp indexes shared memory.
  const int nt = blockDim.x / a.pairs_per_cta;  // at most kThreads (gemv_threads)
  const int sub = threadIdx.x / nt, tid = threadIdx.x - sub * nt;
  const int lane = tid % 32, warp = tid / 32, num_warps = nt / 32, cta_warp = threadIdx.x / 32;
  const int num_vecs = a.K / VEC;
  const int m_count = a.num_tokens;
  // The last CTA's spare pair slots redo the last pair and write nothing.
  const int pair_index = blockIdx.x * a.pairs_per_cta + sub;
  const bool writes = pair_index < a.num_pairs;
  const int pair = writes ? pair_index : a.num_pairs - 1;

  // 1. This pair's rows.
  int row[kRows];
  pair_rows<T, E>(a, pair, row);
  const bool valid1 = row[1] < a.N;  // only the last pair of an odd N has one row
  const uint4* w_row[kRows] = {
      reinterpret_cast<const uint4*>(a.weight + static_cast<int64_t>(row[0]) * a.K),
      reinterpret_cast<const uint4*>(a.weight + static_cast<int64_t>(valid1 ? row[1] : row[0]) * a.K)};

  // 2. Independent of earlier kernels, so before the wait: the first weight chunk; the norm
  // weight's vectors of that chunk, copied to shared memory (cp.async: no registers held, no
  // stall; each thread later reads only the slots it copied); the epilogue's step constants.
  uint4 w[kRows][kPreload];
  const uint64_t policy = weight_policy(a.l2_evict_first);
  auto load_chunk = [&](int base) { load_weights(w_row, base + tid, nt, num_vecs, policy, w); };
  load_chunk(0);
  // [pair slot][kPreload][nt]: blockDim.x <= kThreads
  __shared__ __align__(16) uint4 s_nw_cta[kNorm ? kPreload * kThreads : 1];
  uint4* s_nw = s_nw_cta + (kNorm ? sub * kPreload * nt : 0);
  if constexpr (kNorm) stage_norm_weight(a.norm_weight, s_nw, tid, nt, num_vecs);
  EpiIn in;  // thread m < m_count writes token m's outputs (step 6)
  if (tid < m_count) epi_before_wait<T, E>(a, tid, row[0], row[1], in);
  pdl::launch_dependents();
  pdl::wait();  // everything below may read what the previous kernel wrote
  if (tid < m_count) epi_after_wait<T, E>(a, tid, row[0], row[1], true, valid1, in);

  // 3. RMSNorm prologue: 1 / rms of each token's row, reduced over the pair's threads (a one-warp
  // pair needs no shared memory: the butterfly leaves the sum in every lane). With scaled sums
  // the squares are summed in the dot products' pass instead and reduced with their sums (step 5).
  const bool scaled = kNorm && a.norm_scaled;
  __shared__ float s_sq[kWarps][MT];
  float inv_rms[MT], sq[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) sq[m] = 0.f, inv_rms[m] = 1.f;
  if (kNorm && !scaled) {
    for (int k = tid; k < num_vecs; k += nt) {
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < m_count) {
          sq[m] = add_squares8<T>(*reinterpret_cast<const uint4*>(a.x + m * a.x_stride + k * VEC),
                                  sq[m]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      sq[m] = warp_sum(sq[m]);
      if (lane == 0) s_sq[cta_warp][m] = sq[m];
    }
    if (num_warps > 1) __syncthreads();
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float s = sq[m];
      if (num_warps > 1) {
        s = 0.f;
        for (int i = 0; i < num_warps; ++i) s += s_sq[cta_warp - warp + i][m];
      }
      inv_rms[m] = rsqrtf(s / static_cast<float>(a.K) + a.eps);
    }
  }

  // 4. Dot products, fp32 accumulation.
  float acc[kRows][MT];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.f;
  }
  auto compute_chunk = [&](int base) {
#pragma unroll
    for (int v = 0; v < kPreload; ++v) {
      const int k = base + v * nt + tid;
      if (k >= num_vecs) break;
      float wf[kRows][VEC];
#pragma unroll
      for (int r = 0; r < kRows; ++r) unpack8<T>(w[r][v], wf[r]);
      uint4 nw = {};
      if constexpr (kNorm) {
        nw = base == 0 ? s_nw[v * nt + tid]
                       : *reinterpret_cast<const uint4*>(a.norm_weight + k * VEC);
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < m_count) {
          float xf[VEC];
          uint4 xv = *reinterpret_cast<const uint4*>(a.x + m * a.x_stride + k * VEC);
          if constexpr (kNorm) {
            if (scaled) {
              sq[m] = add_squares8<T>(xv, sq[m]);
              xv = mul8<T>(xv, nw);
            } else {
              xv = norm8<T>(xv, nw, inv_rms[m]);
            }
          }
          unpack8<T>(xv, xf);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) acc[r][m] = fmaf(wf[r][i], xf[i], acc[r][m]);
          }
        }
      }
    }
  };
  if constexpr (kNorm) {
    cp_async_wait<0>();  // this thread's s_nw slots
    compiler_fence();
  }
  compute_chunk(0);
  for (int base = kPreload * nt; base < num_vecs; base += kPreload * nt) {
    load_chunk(base);
    compute_chunk(base);
  }

  // 5. Reduce over the pair's threads: warp shuffles, then one shared-memory row per warp (a
  // one-warp pair: lane m keeps token m's sums); with scaled sums the squares alongside.
  __shared__ float s_acc[kWarps][kRows][MT];
  float y[kRows] = {0.f, 0.f}, y_sq = 0.f;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float s = warp_sum(acc[r][m]);
      if (num_warps == 1 && m == tid) y[r] = s;
      if (lane == 0) s_acc[cta_warp][r][m] = s;
    }
    if (scaled) {
      const float s = warp_sum(sq[m]);
      if (num_warps == 1 && m == tid) y_sq = s;
      if (lane == 0) s_sq[cta_warp][m] = s;
    }
  }
  if (num_warps > 1) __syncthreads();
  if (tid >= m_count || !writes) return;

  // 6. Epilogue: thread m writes token m's outputs (scaled sums: times the token's 1 / rms).
  const int m = tid;
  if (num_warps > 1) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float s = 0.f;
      for (int i = 0; i < num_warps; ++i) s += s_acc[cta_warp - warp + i][r][m];
      y[r] = s;
    }
    if (scaled) {
      y_sq = 0.f;
      for (int i = 0; i < num_warps; ++i) y_sq += s_sq[cta_warp - warp + i][m];
    }
  }
  if (scaled) {
    const float r = rsqrtf(y_sq / static_cast<float>(a.K) + a.eps);
    y[0] *= r, y[1] *= r;
  }
  write_pair<T, E>(a, m, row[0], row[1], true, valid1, y[0], y[1], in);
}

// ---- the looping kernel (one token) -------------------------------------------------------------
// For one token, K within one chunk, and more pair groups (a CTA's pairs) than fit the GPU at once
// (SmolLM2-135M's and Qwen3-0.6B's LM heads, Qwen3-0.6B's gate/up) or a small matrix (loop_grid).
// gemv_kernel would run them in waves of CTAs that each load, reduce, store and exit, and a slot's
// next loads wait for that exit. Here a smaller grid loops over the groups (group = blockIdx.x +
// i * gridDim.x) and loads group i + 1's weights (and its epilogue's inputs) before it computes
// group i, so every thread keeps loads in flight. The activations are read, and multiplied by the
// norm weight (or normalized), once.
// Per pair the arithmetic is gemv_kernel's at one token, in the same order: bit-equal.
template <typename T, Epilogue E>
__global__ void __launch_bounds__(kThreads) gemv_loop_kernel(const GemvArgs<T> a) {
  constexpr int VEC = 8;
  constexpr bool kNorm = has_norm(E);
  const int ppc = a.pairs_per_cta, nt = blockDim.x / ppc;
  const int sub = threadIdx.x / nt, tid = threadIdx.x - sub * nt;
  const int lane = tid % 32, warp = tid / 32, num_warps = nt / 32, cta_warp = threadIdx.x / 32;
  const int num_vecs = a.K / VEC;
  const int num_groups = (a.num_pairs + ppc - 1) / ppc;
  const uint64_t policy = weight_policy(a.l2_evict_first);

  // A group's pair slot for this thread: its rows and weights, and whether it writes (the last
  // group's spare slots redo the last pair and write nothing).
  struct Slot {
    int row[kRows];
    bool writes, valid1;
    uint4 w[kRows][kPreload];
    EpiIn in;
  };
  auto fetch = [&](int group, Slot& s) {
    const int pair_index = group * ppc + sub;
    s.writes = pair_index < a.num_pairs;
    pair_rows<T, E>(a, s.writes ? pair_index : a.num_pairs - 1, s.row);
    s.valid1 = s.row[1] < a.N;
    const uint4* w_row[kRows] = {
        reinterpret_cast<const uint4*>(a.weight + static_cast<int64_t>(s.row[0]) * a.K),
        reinterpret_cast<const uint4*>(a.weight +
                                       static_cast<int64_t>(s.valid1 ? s.row[1] : s.row[0]) * a.K)};
    load_weights(w_row, tid, nt, num_vecs, policy, s.w);
    s.in = EpiIn{};
    if (tid == 0) epi_before_wait<T, E>(a, 0, s.row[0], s.row[1], s.in);
  };

  // Before the wait, as in gemv_kernel: the first group's weights and step constants, the norm
  // weight's vectors (cp.async to this thread's shared-memory slots).
  int group = blockIdx.x;
  Slot cur;
  fetch(group, cur);
  __shared__ __align__(16) uint4 s_nw_cta[kNorm ? kPreload * kThreads : 1];
  uint4* s_nw = s_nw_cta + (kNorm ? sub * kPreload * nt : 0);
  if constexpr (kNorm) stage_norm_weight(a.norm_weight, s_nw, tid, nt, num_vecs);
  pdl::launch_dependents();
  pdl::wait();  // everything below may read what the previous kernel wrote
  if (tid == 0) epi_after_wait<T, E>(a, 0, cur.row[0], cur.row[1], true, cur.valid1, cur.in);

  // The token's activations, normalized (RMSNorm prologue: 1 / rms over the pair's threads).
  uint4 xv[kPreload];
#pragma unroll
  for (int v = 0; v < kPreload; ++v) {
    const int k = v * nt + tid;
    xv[v] = k < num_vecs ? *reinterpret_cast<const uint4*>(a.x + k * VEC) : uint4{};
  }
  // With scaled sums (GemvArgs::norm_scaled) the activations only take the norm weight's product,
  // and the squares are reduced with the first group's sums, 1 / rms scaling each group's sums.
  const bool scaled = kNorm && a.norm_scaled;
  __shared__ float s_sq[kWarps];
  float sq = 0.f, inv_rms = 1.f;
  if constexpr (kNorm) {
#pragma unroll
    for (int v = 0; v < kPreload; ++v) {
      if (v * nt + tid < num_vecs) sq = add_squares8<T>(xv[v], sq);
    }
    if (!scaled) {
      sq = warp_sum(sq);
      if (lane == 0) s_sq[cta_warp] = sq;
      if (num_warps > 1) __syncthreads();
      float s = sq;
      if (num_warps > 1) {
        s = 0.f;
        for (int i = 0; i < num_warps; ++i) s += s_sq[cta_warp - warp + i];
      }
      inv_rms = rsqrtf(s / static_cast<float>(a.K) + a.eps);
    }
    cp_async_wait<0>();  // this thread's s_nw slots
    compiler_fence();
#pragma unroll
    for (int v = 0; v < kPreload; ++v) {
      if (v * nt + tid < num_vecs) {
        xv[v] = scaled ? mul8<T>(xv[v], s_nw[v * nt + tid])
                       : norm8<T>(xv[v], s_nw[v * nt + tid], inv_rms);
      }
    }
  }
  bool rms_pending = scaled;  // the squares' reduction, done with the first group's
  constexpr bool kStoreOut = E == Epilogue::kStore || E == Epilogue::kNormStore;
  unsigned long long key = 0ull;  // greedy epilogue: the best key of this thread's pairs

  // The groups: the next one's loads first, then this one's dot products, reduction and epilogue
  // (group is CTA-uniform, so every thread reaches the barriers).
  __shared__ float s_acc[2][kWarps][kRows];  // by the group's parity: one barrier per group
  for (int parity = 0; group < num_groups; parity ^= 1) {
    const int next_group = group + gridDim.x;
    Slot next;
    if (next_group < num_groups) {
      fetch(next_group, next);
      if (tid == 0) epi_after_wait<T, E>(a, 0, next.row[0], next.row[1], true, next.valid1, next.in);
    }
    float acc[kRows] = {0.f, 0.f};
#pragma unroll
    for (int v = 0; v < kPreload; ++v) {
      if (v * nt + tid >= num_vecs) break;
      float wf[kRows][VEC], xf[VEC];
#pragma unroll
      for (int r = 0; r < kRows; ++r) unpack8<T>(cur.w[r][v], wf[r]);
      unpack8<T>(xv[v], xf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[r] = fmaf(wf[r][i], xf[i], acc[r]);
      }
    }
    float y[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      y[r] = warp_sum(acc[r]);
      if (lane == 0) s_acc[parity][cta_warp][r] = y[r];
    }
    if (rms_pending) {
      sq = warp_sum(sq);
      if (lane == 0) s_sq[cta_warp] = sq;
    }
    if (num_warps > 1) __syncthreads();
    if (rms_pending) {
      float s = sq;
      if (num_warps > 1) {
        s = 0.f;
        for (int i = 0; i < num_warps; ++i) s += s_sq[cta_warp - warp + i];
      }
      inv_rms = rsqrtf(s / static_cast<float>(a.K) + a.eps);
      rms_pending = false;
    }
    if (tid == 0 && cur.writes) {
      if (num_warps > 1) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float s = 0.f;
          for (int i = 0; i < num_warps; ++i) s += s_acc[parity][cta_warp - warp + i][r];
          y[r] = s;
        }
      }
      if (scaled) y[0] *= inv_rms, y[1] *= inv_rms;
      write_pair<T, E>(a, 0, cur.row[0], cur.row[1], true, cur.valid1, y[0], y[1], cur.in);
      if constexpr (kStoreOut) {
        if (a.greedy != nullptr) {
          key = max(key, greedy_pair_key<T>(cur.row[0], cur.row[1], cur.valid1, y[0], y[1]));
        }
      }
    }
    cur = next;
    group = next_group;
  }
  if constexpr (kStoreOut) {
    if (a.greedy != nullptr) greedy_finish(a.greedy, a.greedy_state, ppc, sub, tid, key);
  }
}

// ---- launch ------------------------------------------------------------------------------------
// Threads per row pair. At one token: whole warps, just enough that each thread's kPreload slots
// cover a row of K (32 to kThreads), so a pair streams all its weights at once and more pairs fit
// an SM (more bytes in flight); a one-warp pair also skips the shared-memory reductions. At more
// tokens all kThreads share the FMAs, which then bound the kernel.
inline int gemv_threads(int num_tokens, int k) {
  if (num_tokens > 1) return kThreads;
  const int per_thread = (k / 8 + kPreload - 1) / kPreload;
  return std::min(kThreads, std::max(32, (per_thread + 31) / 32 * 32));
}

// Row pairs per CTA, each on `threads` threads of its own: at one token, where a CTA per pair would
// put more than kPairCtasPerSm CTAs on each SM (the LM heads, Llama-3.2-1B's gate/up) or the
// per-shape table says so (`pack`), as many as fit kThreads, so the block scheduler issues fewer,
// fuller CTAs; else one. SmolLM2-135M's projections pack (4 one-warp pairs a CTA): its batch-1
// decode step was 393 against 416 us busy (benchmarks/results/2026-12-04-h200-arrival, call 7).
// VGRAPH_GEMV_PAIRS=n caps it at n instead (comparisons; read at each launch, so a graph keeps what
// it was captured with).
constexpr int kPairCtasPerSm = 8;
inline int pairs_per_cta(int num_tokens, int threads, int num_pairs, bool pack) {
  if (num_tokens > 1) return 1;
  const int fit = kThreads / threads;
  const int cap = env_int("VGRAPH_GEMV_PAIRS", 0, 0, kThreads / 32);  // 0: the rule below
  if (cap > 0) return std::min(fit, cap);
  return pack || num_pairs > kPairCtasPerSm * num_sms() ? fit : 1;
}

// The looping kernel's grid for `groups` pair groups on CTAs of `block` threads over a matrix of
// `weight_bytes`, or 0 for gemv_kernel: as many CTAs as fit the GPU at once where the groups are
// more; and for a small matrix (at most kSmallMib MiB: it streams in a fraction of a kernel's
// fixed cost at any grid) kSmallCtasPerSm CTAs an SM, which made SmolLM2-135M's decode step 0.04
// ms faster than a CTA per group (2026-12-03: fewer CTAs to schedule and retire, and room on each
// SM for the next kernel's CTAs to load ahead of its wait). Switches (comparisons; read at each
// launch, so a graph keeps what it was captured with): VGRAPH_GEMV_CTAS_PER_SM=n caps the CTAs an
// SM gets at n (0 turns the loop off), VGRAPH_GEMV_SMALL_MIB and VGRAPH_GEMV_SMALL_CTAS_PER_SM
// replace kSmallMib and kSmallCtasPerSm.
constexpr int kSmallMib = 4;
constexpr int kSmallCtasPerSm = 2;
template <typename T, Epilogue E>
int loop_grid(int groups, int block, int64_t weight_bytes) {
  int fit = 0;  // the kernel's occupancy: its registers bound it
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, gemv_loop_kernel<T, E>,
                                                               block, 0));
  const int64_t small_mib = env_int("VGRAPH_GEMV_SMALL_MIB", kSmallMib, 0, 1024);
  int per_sm = fit;
  if (weight_bytes <= (small_mib << 20)) {
    per_sm = env_int("VGRAPH_GEMV_SMALL_CTAS_PER_SM", kSmallCtasPerSm, 1, 32);
  }
  per_sm = std::min({fit, per_sm, env_int("VGRAPH_GEMV_CTAS_PER_SM", fit, 0, 32)});
  const int grid = per_sm * num_sms();
  return grid > 0 && groups > grid ? grid : 0;
}

template <typename T, int MT, Epilogue E>
bool launch_mt(const GemvArgs<T>& a, int num_pairs, cudaStream_t stream) {
  GemvArgs<T> args = a;
  const int threads = gemv_threads(a.num_tokens, a.K);
  args.num_pairs = num_pairs;
  args.pairs_per_cta = pairs_per_cta(a.num_tokens, threads, num_pairs, a.pack_pairs);
  const int block = threads * args.pairs_per_cta;
  const int groups = (num_pairs + args.pairs_per_cta - 1) / args.pairs_per_cta;
  cudaLaunchAttribute attr[1];
  // One token whose K fits one chunk: the looping kernel where loop_grid says.
  const bool one_chunk = a.K / 8 <= kPreload * threads;
  const int64_t weight_bytes = static_cast<int64_t>(a.N) * a.K * sizeof(T);
  const int loop =
      MT == 1 && one_chunk && a.may_loop ? loop_grid<T, E>(groups, block, weight_bytes) : 0;
  if (loop > 0) {
    const cudaLaunchConfig_t cfg =
        pdl::launch_config(dim3(loop), dim3(block), 0, stream, attr, a.pdl);
    C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_loop_kernel<T, E>, args));
    return args.greedy != nullptr;
  }
  const cudaLaunchConfig_t cfg =
      pdl::launch_config(dim3(groups), dim3(block), 0, stream, attr, a.pdl);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_kernel<T, MT, E>, args));
  return false;  // no greedy epilogue: a CTA per pair group
}

template <typename T, Epilogue E>
bool launch_gemv(const GemvArgs<T>& a, int num_pairs, cudaStream_t stream) {
  const int m = a.num_tokens;
  if (m <= 1) return launch_mt<T, 1, E>(a, num_pairs, stream);
  if (m <= 2) return launch_mt<T, 2, E>(a, num_pairs, stream);
  if (m <= 4) return launch_mt<T, 4, E>(a, num_pairs, stream);
  if (m <= 8) return launch_mt<T, 8, E>(a, num_pairs, stream);
  if (m <= 16) return launch_mt<T, 16, E>(a, num_pairs, stream);
  return launch_mt<T, 32, E>(a, num_pairs, stream);
}

#define VGRAPH_INSTANTIATE_GEMV(E)                                                               \
  template bool launch_gemv<c10::Half, E>(const GemvArgs<c10::Half>&, int, cudaStream_t);     \
  template bool launch_gemv<c10::BFloat16, E>(const GemvArgs<c10::BFloat16>&, int, cudaStream_t); \
  template void launch_gemv_mma<c10::Half, E>(const GemvArgs<c10::Half>&, cudaStream_t);      \
  template void launch_gemv_mma<c10::BFloat16, E>(const GemvArgs<c10::BFloat16>&, cudaStream_t); \
  template bool launch_gemv_wide<c10::Half, E>(const GemvArgs<c10::Half>&, cudaStream_t);     \
  template bool launch_gemv_wide<c10::BFloat16, E>(const GemvArgs<c10::BFloat16>&, cudaStream_t); \
  template int64_t wide_packed_numel<c10::Half, E>(const GemvArgs<c10::Half>&);                  \
  template int64_t wide_packed_numel<c10::BFloat16, E>(const GemvArgs<c10::BFloat16>&);          \
  template void pack_wide<c10::Half, E>(const GemvArgs<c10::Half>&, c10::Half*, cudaStream_t);    \
  template void pack_wide<c10::BFloat16, E>(const GemvArgs<c10::BFloat16>&, c10::BFloat16*,      \
                                            cudaStream_t);

}  // namespace gemv
}  // namespace vgraph

#include "decode_gemv_mma.cuh"
#include "decode_gemv_wide.cuh"

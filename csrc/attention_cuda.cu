// paged_attention on CUDA: split-K ("flash-decoding") over the paged KV cache, in one launch.
//
// Grid (num_tokens, num_heads / GT, num_parts): one CTA per (query token, group of GT query heads
// sharing one kv head, context partition). Each CTA streams its partition of K/V once for all GT
// heads through a cp.async pipeline, keeps an online softmax per token lane, and merges the lanes
// in shared memory. A context that fits one partition is written as the final row at once. A
// longer one leaves one unnormalised partial per partition in the workspace; the last CTA of the
// (token, group) to finish, told by an arrival counter, merges them into the output row (there is
// no second launch). Prefill and mixed batches use the same path per query token (correct, not
// tuned: K/V are re-read per token, from L2).
//
// Append (key/value/slot_mapping given): the step's K/V rows are stored in their slots by one CTA
// per (token, kv head), and every CTA reads the step's own positions (>= the request's cached
// length) from those rows instead of the cache, so no CTA waits for another's store: one launch
// instead of a cache-write kernel and an attention kernel.
//
// Programmatic dependent launch: metadata lookups (request, lengths, block ids) and the first
// pipeline stages over positions cached by earlier steps run before `griddepcontrol.wait`, which
// lets them overlap the previous kernel (the QKV projection); the query and the step's K/V are
// read after it.
//
// CUDA graphs: the grid depends only on num_tokens, num_heads and the static sizes of the buffers
// (block_table width, SM count). Every length, request boundary and block id is read on the device;
// a partition's length is derived there from the sequence length, and CTAs past the end exit.
// The arrival counters live in a process-lifetime buffer per device (merge_counters) that is zero
// between launches: the merging CTA resets its counter, so a replay or the next call starts clean.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "cache.h"
#include "common.h"
#include "cp_async.cuh"
#include "device_info.cuh"
#include "pdl.cuh"

namespace vgraph {
namespace {

constexpr int kThreads = 128;         // threads per CTA (4 warps)
constexpr int kTokensPerLane = 4;     // consecutive positions per token lane per iteration
constexpr int kStages = 3;            // cp.async pipeline depth: 48 KiB smem, 4 CTAs per SM
constexpr int kMinChunk = 64;         // smallest partition, in positions (VGRAPH_ATTN_MIN_CHUNK)
constexpr int kOnePartIters = 4;      // a context of at most this many iterations is not split
                                      // (VGRAPH_ATTN_ONE_PART_ITERS)
constexpr int kMaxChunk = 8192;       // longest partition a long context is cut into
constexpr int kMaxParts = 512;        // bound on partitions (the merge keeps weights in smem)
constexpr int64_t kMaxWorkspaceBytes = 64 << 20;  // bound on the partials of one call
constexpr int64_t kMinCounters = 4096;            // first size of a device's counter buffer
constexpr int kMaxGroupHeads = 8;     // query heads per CTA, at most (VGRAPH_ATTN_GROUP_HEADS)

struct AttnParams {
  void* out;                     // [num_tokens, num_heads, head_dim] (strided rows)
  const void* query;             // [num_tokens, num_heads, head_dim] (strided rows)
  const void* key_cache;         // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* value_cache;       // [num_blocks, block_size, num_kv_heads, head_dim]
  const int* query_start_loc;    // [num_reqs_padded + 1]
  const int* seq_lens;           // [num_reqs_padded]
  const int* block_table;        // [num_reqs_padded, max_blocks_per_req] (row stride bt_stride)
  float* part_out;               // [num_tokens, num_heads, num_parts, head_dim]
  float2* part_ml;               // [num_tokens, num_heads, num_parts] (max in log2 units, sum)
  unsigned int* counters;        // [num_tokens, num_heads / GT] arrivals, zero between launches
  // Append (key != nullptr): this step's K/V rows [num_tokens, num_kv_heads, head_dim] (strided),
  // written to their slots and read from these rows for the step's own positions.
  const void* key;
  const void* value;
  const int64_t* slot_mapping;   // [num_tokens], -1 = pad token (not written)
  int64_t k_tok_stride, k_head_stride, v_tok_stride, v_head_stride;
  int64_t q_tok_stride, q_head_stride, o_tok_stride, o_head_stride, bt_stride;
  int num_heads, num_kv_heads, num_reqs, max_blocks, log2_block_size, num_parts, group;
  int min_chunk;                 // smallest partition, in positions (min_chunk())
  int one_part;                  // a context of at most this many positions is not split
  int guess_blocks;              // load request t's first block ids with the lookup (1) or after
  float scale_log2;              // softmax scale * log2(e): scores live in log2 units
};

template <typename scalar_t, int HEAD_DIM, int GT>
struct AttnCfg {
  static constexpr int kVec = 16 / sizeof(scalar_t);       // elements per 16-byte load
  static constexpr int kLanes = HEAD_DIM / kVec;           // threads sharing one position
  static constexpr int kTokenLanes = kThreads / kLanes;    // positions processed side by side
  static constexpr int kTokensPerIter = kTokenLanes * kTokensPerLane;
  static constexpr int kPipeBytes = kStages * kTokensPerLane * 2 * kThreads * 16;
  static constexpr int kMergeBytes = kTokenLanes * GT * (HEAD_DIM + 2) * 4;
  // merge of the partitions: weights and sums [GT][kMaxParts] each, 1 / sum [GT], float4 rows
  static constexpr int kColumns = GT * HEAD_DIM / 4;  // float4 columns of the GT output rows
  static constexpr int kPartsInFlight = kColumns >= kThreads ? 1 : kThreads / kColumns;
  static constexpr int kPartsBytes = 2 * GT * kMaxParts * 4 + (GT + 3) / 4 * 16 + kThreads * 16;
  static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
  static_assert(kLanes <= 32 && 32 % kLanes == 0, "a position's lanes must sit in one warp");
  static_assert(kColumns % kThreads == 0 || kThreads % kColumns == 0, "columns tile the CTA");
  static_assert(kPartsBytes <= kSmemBytes, "the partition merge fits the pipeline's smem");
};

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16 bytes -> float[16 / sizeof(scalar_t)].
template <typename scalar_t>
__device__ __forceinline__ void unpack(const uint4& raw, float* f);

template <>
__device__ __forceinline__ void unpack<float>(const uint4& raw, float* f) {
  f[0] = __uint_as_float(raw.x);
  f[1] = __uint_as_float(raw.y);
  f[2] = __uint_as_float(raw.z);
  f[3] = __uint_as_float(raw.w);
}

template <>
__device__ __forceinline__ void unpack<c10::Half>(const uint4& raw, float* f) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xffffu)));
    f[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
  }
}

template <>
__device__ __forceinline__ void unpack<c10::BFloat16>(const uint4& raw, float* f) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // bf16 is the high half of a float32
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Owner request of token t (-1 for a pad token); s_meta gets {r, q_start, q_end, seq_len}. All
// threads test candidate requests in parallel, starting at min(t, num_reqs - 1) and going down,
// so a decode batch (request t owns token t) resolves in one round trip.
__device__ int find_request(const int* __restrict__ qsl, const int* __restrict__ seq_lens,
                            int num_reqs, int t, int* s_meta) {
  if (threadIdx.x == 0) s_meta[0] = -1;
  __syncthreads();
  const int first = min(t, num_reqs - 1);
  for (int base = 0; base < num_reqs; base += kThreads) {
    int r = first - base - static_cast<int>(threadIdx.x);
    if (r < 0) r += num_reqs;
    bool hit = false;
    if (base + static_cast<int>(threadIdx.x) < num_reqs) {
      const int a = qsl[r];
      const int b = qsl[r + 1];
      const int seq_len = seq_lens[r];  // loaded with the bounds, used only on a hit
      hit = a <= t && t < b;
      if (hit) {
        s_meta[0] = r;
        s_meta[1] = a;
        s_meta[2] = b;
        s_meta[3] = seq_len;
      }
    }
    if (__syncthreads_or(hit)) break;
  }
  return s_meta[0];
}

// A context of ctx positions is cut into `used` <= num_parts chunks of `chunk` positions (a
// multiple of the block size, at least min_chunk), except that one of at most one_part positions
// stays whole: its CTA's few pipeline iterations cost less than the partials' merge (an arrival
// atomic and two dependent reads of the partials; H200, 2026-12-02). Computed identically by every
// CTA of a token.
__device__ __forceinline__ void split_context(int ctx, int num_parts, int log2_bs, int min_chunk,
                                              int one_part, int& chunk, int& used) {
  if (ctx <= 0) {
    chunk = 0;
    used = 0;
    return;
  }
  if (ctx <= one_part) {
    chunk = ((ctx + (1 << log2_bs) - 1) >> log2_bs) << log2_bs;
    used = 1;
    return;
  }
  int c = (ctx + num_parts - 1) / num_parts;
  c = ((c + (1 << log2_bs) - 1) >> log2_bs) << log2_bs;
  c = max(c, min_chunk);
  chunk = c;
  used = (ctx + c - 1) / c;
}

// This thread's 16 bytes of token t's K and V rows of kv head kvh, and where they go in the cache
// (dst null: nothing to store; the first 2 * HEAD_DIM / VEC threads store, slot -1 is a pad token).
// The cache is contiguous, so slot s starts at element s * num_kv_heads * head_dim. Loaded first
// and stored later, so the load's round trip overlaps the query's.
struct KvRow {
  uint4* dst = nullptr;
  uint4 data = {0u, 0u, 0u, 0u};
};

template <typename scalar_t, int HEAD_DIM>
__device__ __forceinline__ KvRow load_kv_row(const AttnParams& p, int t, int kvh) {
  constexpr int VEC = 16 / sizeof(scalar_t);
  constexpr int LANES = HEAD_DIM / VEC;
  const int tid = threadIdx.x;
  KvRow row;
  if (tid >= 2 * LANES) return row;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return row;
  const bool is_v = tid >= LANES;
  const int d = (tid % LANES) * VEC;
  const scalar_t* src = reinterpret_cast<const scalar_t*>(is_v ? p.value : p.key) +
                        t * (is_v ? p.v_tok_stride : p.k_tok_stride) +
                        kvh * (is_v ? p.v_head_stride : p.k_head_stride) + d;
  scalar_t* dst = reinterpret_cast<scalar_t*>(const_cast<void*>(is_v ? p.value_cache : p.key_cache)) +
                  (slot * p.num_kv_heads + kvh) * HEAD_DIM + d;
  row.data = *reinterpret_cast<const uint4*>(src);
  row.dst = reinterpret_cast<uint4*>(dst);
  return row;
}

// Merges the `used` partials of heads h0..h0+GT of token t into their output rows:
// out = sum_p acc_p 2^(m_p - M) / sum_p l_p 2^(m_p - M), M the largest m_p. Called by the last CTA
// of the (token, group) to arrive, after its acquire fence: the partials of the other CTAs were
// written during this launch, so they are read through L2 (__ldcg), never from a stale L1 line.
// One warp per head computes the weights; then kPartsInFlight partitions are read side by side
// (float4 columns), their sums added in shared memory.
template <typename scalar_t, int HEAD_DIM, int GT>
__device__ __forceinline__ void merge_partials(const AttnParams& p, int t, int h0, int used,
                                               scalar_t* out, unsigned char* smem) {
  using Cfg = AttnCfg<scalar_t, HEAD_DIM, GT>;
  constexpr int DV = HEAD_DIM / 4;  // float4 columns of one head's row
  constexpr int COLS = Cfg::kColumns;
  constexpr int PL = Cfg::kPartsInFlight;
  float* s_w = reinterpret_cast<float*>(smem);  // [GT][kMaxParts] m_p, then 2^(m_p - M)
  float* s_l = s_w + GT * kMaxParts;            // [GT][kMaxParts] l_p
  float* s_inv = s_l + GT * kMaxParts;          // [GT] 1 / sum_p l_p 2^(m_p - M)
  float4* s_acc = reinterpret_cast<float4*>(s_inv + ((GT + 3) / 4) * 4);  // [PL][COLS]
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int64_t row0 = (static_cast<int64_t>(t) * p.num_heads + h0) * p.num_parts;
  const int pl = tid / COLS;  // 0 when COLS >= kThreads

  // The first two partials of this thread's first column, loaded with the weights' inputs: both
  // in one round trip instead of one after the other.
  auto column = [&](int c) {
    return reinterpret_cast<const float4*>(p.part_out) +
           (row0 + static_cast<int64_t>(c / DV) * p.num_parts) * DV + c % DV;
  };
  const float4 zero4 = make_float4(0.f, 0.f, 0.f, 0.f);
  const float4* po0 = column(tid % COLS);
  const float4 pre0 = pl < used ? __ldcg(po0 + static_cast<int64_t>(pl) * DV) : zero4;
  const float4 pre1 = pl + PL < used ? __ldcg(po0 + static_cast<int64_t>(pl + PL) * DV) : zero4;

  for (int g = tid / 32; g < GT; g += kThreads / 32) {
    const float2* ml = p.part_ml + row0 + g * p.num_parts;
    float* w = s_w + g * kMaxParts;
    float* l = s_l + g * kMaxParts;
    float mx = -INFINITY;  // every used partition saw a position: its m_p is finite
    for (int i = lane; i < used; i += 32) {
      const float2 e = __ldcg(ml + i);
      w[i] = e.x;
      l[i] = e.y;
      mx = fmaxf(mx, e.x);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.f;
    for (int i = lane; i < used; i += 32) {  // the entries this lane wrote above
      const float wi = fast_exp2(w[i] - mx);
      w[i] = wi;
      sum = fmaf(l[i], wi, sum);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) s_inv[g] = 1.f / sum;
  }
  __syncthreads();

  auto store = [&](int c, float4 a) {  // column c of the GT rows, normalised, in the dtype
    const int g = c / DV;
    const float inv = s_inv[g];
    scalar_t* o = out + (h0 + g) * p.o_head_stride + (c % DV) * 4;
    o[0] = static_cast<scalar_t>(a.x * inv);
    o[1] = static_cast<scalar_t>(a.y * inv);
    o[2] = static_cast<scalar_t>(a.z * inv);
    o[3] = static_cast<scalar_t>(a.w * inv);
  };
  for (int c = tid % COLS; c < COLS; c += kThreads) {
    const int g = c / DV;
    const float4* po = column(c);
    const bool first = c == tid % COLS;
    const float* w = s_w + g * kMaxParts;
    float4 a = zero4;
#pragma unroll 4
    for (int i = pl; i < used; i += PL) {
      const float4 v = first && i == pl            ? pre0
                       : first && i == pl + PL     ? pre1
                                                   : __ldcg(po + static_cast<int64_t>(i) * DV);
      const float wi = w[i];
      a.x = fmaf(wi, v.x, a.x);
      a.y = fmaf(wi, v.y, a.y);
      a.z = fmaf(wi, v.z, a.z);
      a.w = fmaf(wi, v.w, a.w);
    }
    if constexpr (PL == 1) {
      store(c, a);
    } else {
      s_acc[pl * COLS + c] = a;
    }
  }
  if constexpr (PL > 1) {
    __syncthreads();
    if (tid < COLS) {
      float4 r = s_acc[tid];
#pragma unroll
      for (int j = 1; j < PL; ++j) {
        const float4 v = s_acc[j * COLS + tid];
        r.x += v.x;
        r.y += v.y;
        r.z += v.z;
        r.w += v.w;
      }
      store(tid, r);
    }
  }
}

template <typename scalar_t, int HEAD_DIM, int GT>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(const AttnParams p) {
  using Cfg = AttnCfg<scalar_t, HEAD_DIM, GT>;
  constexpr int VEC = Cfg::kVec;
  constexpr int LANES = Cfg::kLanes;
  constexpr int TLANES = Cfg::kTokenLanes;
  constexpr int U = kTokensPerLane;
  constexpr int TPI = Cfg::kTokensPerIter;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int s_meta[4];
  __shared__ bool s_last;  // this CTA is the last of its (token, group) to arrive

  const int t = blockIdx.x;
  const int h0 = blockIdx.y * GT;
  const int part = blockIdx.z;
  const int tid = threadIdx.x;
  const int lane_d = tid % LANES;  // which 16-byte slice of head_dim
  const int tl = tid / LANES;      // token lane
  const int kvh = h0 / p.group;
  scalar_t* out = reinterpret_cast<scalar_t*>(p.out) + t * p.o_tok_stride;

  // 1. Which request owns this token, and how many positions it attends to: metadata the host
  // copied before the step, so it is read before waiting for the previous kernel (PDL).
  // With p.guess_blocks, the block ids of the first kStages iterations of partition 0 are loaded
  // for request t in the same round trip as the lookup (a decode batch: request t owns token t),
  // and used where the lookup agrees (step 2): the same addresses block_of reads, one dependent
  // round trip fewer before the first copy.
  int guess[kStages];
  const bool guessing = p.guess_blocks != 0 && part == 0 && t < p.num_reqs;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    const int col = (s * TPI + tl * U) >> p.log2_block_size;
    guess[s] = guessing && col < p.max_blocks
                   ? p.block_table[static_cast<int64_t>(t) * p.bt_stride + col]
                   : 0;
  }
  const int r = find_request(p.query_start_loc, p.seq_lens, p.num_reqs, t, s_meta);
  int ctx = 0, q_start = 0, ctx_old = 0;  // ctx_old: positions cached before this step
  if (r >= 0) {
    q_start = s_meta[1];
    ctx_old = s_meta[3] - (s_meta[2] - q_start);
    ctx = ctx_old + (t - q_start) + 1;
    ctx = max(0, min(ctx, p.max_blocks << p.log2_block_size));
  }
  int chunk, used;
  split_context(ctx, p.num_parts, p.log2_block_size, p.min_chunk, p.one_part, chunk, used);
  if (used > 0 && part >= used) return;  // past the end (never the appending CTA: part 0)
  const int start = part * chunk;
  const int end = min(start + chunk, ctx);
  const int num_iters = (end - start + TPI - 1) / TPI;  // 0 for a pad token

  // 2. Stream K/V: lane (tl, lane_d) owns positions pos0 + [0, U) of each iteration, all in one
  // block (block_size >= U and pos0 % U == 0), staged in its own smem slots so no barrier is
  // needed between the copy and the use.
  uint4* stage_buf = reinterpret_cast<uint4*>(smem);  // [kStages][U][2][kThreads]
  const int64_t tok_stride = static_cast<int64_t>(p.num_kv_heads) * HEAD_DIM;
  const int64_t blk_stride = tok_stride << p.log2_block_size;
  const int bs_mask = (1 << p.log2_block_size) - 1;
  const scalar_t* kc =
      reinterpret_cast<const scalar_t*>(p.key_cache) + kvh * HEAD_DIM + lane_d * VEC;
  const scalar_t* vc =
      reinterpret_cast<const scalar_t*>(p.value_cache) + kvh * HEAD_DIM + lane_d * VEC;
  const int* bt = p.block_table + static_cast<int64_t>(max(r, 0)) * p.bt_stride;
  // Append: positions >= ctx_old are this step's tokens, read from their K/V rows.
  const bool from_rows = p.key != nullptr;
  const scalar_t* kr = from_rows ? reinterpret_cast<const scalar_t*>(p.key) +
                                       kvh * p.k_head_stride + lane_d * VEC
                                 : nullptr;
  const scalar_t* vr = from_rows ? reinterpret_cast<const scalar_t*>(p.value) +
                                       kvh * p.v_head_stride + lane_d * VEC
                                 : nullptr;

  // Block ids are loaded a stage ahead of their copies, so no copy waits on a block-table read.
  auto block_of = [&](int iter) {
    const int pos0 = start + iter * TPI + tl * U;
    return iter < num_iters && pos0 < end ? bt[pos0 >> p.log2_block_size] : 0;
  };
  auto issue = [&](int iter, int blk) {
    if (iter < num_iters) {
      const int pos0 = start + iter * TPI + tl * U;
      uint4* slot = stage_buf + (iter % kStages) * U * 2 * kThreads + tid;
      const int64_t off = static_cast<int64_t>(blk) * blk_stride +
                          static_cast<int64_t>(pos0 & bs_mask) * tok_stride;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int pos = pos0 + u;
        const bool valid = pos < end;
        const scalar_t* ks = kc;
        const scalar_t* vs = vc;
        int64_t ko = 0, vo = 0;
        if (valid && from_rows && pos >= ctx_old) {
          const int64_t row = q_start + (pos - ctx_old);  // in [q_start, t]
          ks = kr, vs = vr, ko = row * p.k_tok_stride, vo = row * p.v_tok_stride;
        } else if (valid) {
          ko = vo = off + u * tok_stride;
        }
        cp_async16(slot + (2 * u) * kThreads, ks + ko, valid);
        cp_async16(slot + (2 * u + 1) * kThreads, vs + vo, valid);
      }
    }
    cp_async_commit();  // an empty group past the end keeps the group count uniform
  };

  // The pipeline's leading stages that read only positions cached by earlier steps are issued
  // before the wait, overlapping the previous kernel's tail. (Positions from this step, in the
  // cache or in the K/V rows, are written by the previous kernels: after the wait.)
  int blk[kStages];
  const bool guessed = guessing && r == t;  // part 0: start is 0, as the guess assumed
#pragma unroll
  for (int s = 0; s < kStages; ++s) {  // independent loads, one round trip (none if guessed)
    const int pos0 = start + s * TPI + tl * U;
    blk[s] = !guessed ? block_of(s) : (s < num_iters && pos0 < end ? guess[s] : 0);
  }
  int early = 0;  // stages issued before the wait
  while (used > 0 && early < kStages - 1 && min(end, start + (early + 1) * TPI) <= ctx_old) {
    ++early;
  }
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < early) issue(s, blk[s]);
  }
  pdl::launch_dependents();
  pdl::wait();  // below: the query and this step's K/V, written by the previous kernel

  // 3. After the wait, every load at once: the remaining first stages, the query (step 4) and the
  // appended rows. Append: one CTA per (token, kv head) stores the token's K/V rows in its slot;
  // no CTA of this launch reads that slot (the step's own positions are read from the rows).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s >= early) issue(s, blk[s]);
  }
  const bool appends = p.key != nullptr && part == 0 && h0 == kvh * p.group;
  const KvRow kv_row = appends ? load_kv_row<scalar_t, HEAD_DIM>(p, t, kvh) : KvRow{};
  if (used == 0) {  // pad token: the row is defined as zeros
    if (kv_row.dst != nullptr) *kv_row.dst = kv_row.data;
    if (part == 0) {
      for (int i = tid; i < GT * HEAD_DIM; i += kThreads) {
        out[(h0 + i / HEAD_DIM) * p.o_head_stride + i % HEAD_DIM] = static_cast<scalar_t>(0.f);
      }
    }
    return;
  }

  // 4. This lane's slice of the GT query rows, pre-scaled into log2 units.
  float q[GT][VEC];
  {
    const scalar_t* qp =
        reinterpret_cast<const scalar_t*>(p.query) + t * p.q_tok_stride + lane_d * VEC;
#pragma unroll
    for (int g = 0; g < GT; ++g)
#pragma unroll
      for (int v = 0; v < VEC; ++v)
        q[g][v] = static_cast<float>(qp[(h0 + g) * p.q_head_stride + v]) * p.scale_log2;
  }

  if (kv_row.dst != nullptr) *kv_row.dst = kv_row.data;  // after the query's loads are issued

  // Softmax state per token lane: running max m (log2 units), sum l, unnormalised acc.
  float m[GT], l[GT], acc[GT][VEC];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[g][v] = 0.f;
  }
  int next_blk = blk[kStages - 1];

  for (int iter = 0; iter < num_iters; ++iter) {
    cp_async_wait<kStages - 2>();          // this iteration's group has landed
    issue(iter + kStages - 1, next_blk);   // refills the stage consumed by the previous iteration
    next_blk = block_of(iter + kStages);
    const uint4* slot = stage_buf + (iter % kStages) * U * 2 * kThreads + tid;
    const int pos0 = start + iter * TPI + tl * U;

    // Partial dot products of this lane's head_dim slice: s[u][g] = q[g] . k[u].
    float s[U][GT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[VEC];
      unpack<scalar_t>(slot[(2 * u) * kThreads], kf);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float dot = 0.f;
#pragma unroll
        for (int v = 0; v < VEC; ++v) dot = fmaf(q[g][v], kf[v], dot);
        s[u][g] = dot;
      }
    }

    // Full scores (butterfly over the lanes of a position), then the online-softmax step.
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int g = 0; g < GT; ++g) {
#pragma unroll
        for (int off = LANES / 2; off > 0; off >>= 1)
          s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
        if (pos0 + u >= end) s[u][g] = -INFINITY;
      }
    float p[U][GT];  // softmax numerators of this iteration
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[u][g]);
      if (mx > m[g]) {  // rescale only when the running max moves
        const float alpha = fast_exp2(m[g] - mx);
        l[g] *= alpha;
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[g][v] *= alpha;
        m[g] = mx;
      }
      const float ref = m[g] == -INFINITY ? 0.f : m[g];  // all masked so far: p = 0
#pragma unroll
      for (int u = 0; u < U; ++u) {
        p[u][g] = fast_exp2(s[u][g] - ref);
        l[g] += p[u][g];
      }
    }

    // acc += p * V, each V vector converted once for all GT heads.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[VEC];
      unpack<scalar_t>(slot[(2 * u + 1) * kThreads], vf);
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[g][v] = fmaf(p[u][g], vf[v], acc[g][v]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the merge buffers

  // 5. Merge the token lanes' softmax states; token lane 0 saw position `start`, so mx is finite.
  float* s_acc = reinterpret_cast<float*>(smem);  // [TLANES][GT][HEAD_DIM]
  float* s_m = s_acc + TLANES * GT * HEAD_DIM;    // [TLANES][GT]
  float* s_l = s_m + TLANES * GT;                 // [TLANES][GT]
#pragma unroll
  for (int g = 0; g < GT; ++g) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) s_acc[(tl * GT + g) * HEAD_DIM + lane_d * VEC + v] = acc[g][v];
    if (lane_d == 0) {
      s_m[tl * GT + g] = m[g];
      s_l[tl * GT + g] = l[g];
    }
  }
  __syncthreads();
  for (int i = tid; i < GT * HEAD_DIM; i += kThreads) {
    const int g = i / HEAD_DIM;
    const int d = i % HEAD_DIM;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < TLANES; ++j) mx = fmaxf(mx, s_m[j * GT + g]);
    float sum = 0.f, a = 0.f;
#pragma unroll
    for (int j = 0; j < TLANES; ++j) {
      const float w = fast_exp2(s_m[j * GT + g] - mx);
      sum = fmaf(s_l[j * GT + g], w, sum);
      a = fmaf(s_acc[(j * GT + g) * HEAD_DIM + d], w, a);
    }
    if (used == 1) {  // the whole context in one partition: the final row, no counter
      out[(h0 + g) * p.o_head_stride + d] = static_cast<scalar_t>(a / sum);
    } else {
      const int64_t row = (static_cast<int64_t>(t) * p.num_heads + h0 + g) * p.num_parts + part;
      p.part_out[row * HEAD_DIM + d] = a;
      if (d == 0) p.part_ml[row] = make_float2(mx, sum);
    }
  }
  if (used == 1) return;

  // 6. Arrive, and the last arrival merges. The barrier orders every thread's partial stores
  // before thread 0's fence, which (cumulative, as in cooperative groups' grid sync) makes them
  // visible device-wide before the arrival is counted; the CTA that sees the count reach `used`
  // fences again before its threads read the others' partials. No CTA waits for another, so
  // nothing depends on which CTAs are resident together. The last arrival resets the counter:
  // nothing else touches it in this launch, and the next launch is stream-ordered after this one.
  __syncthreads();  // also: every thread is done with the lane-merge buffers
  if (tid == 0) {
    unsigned int* counter = p.counters + static_cast<int64_t>(t) * gridDim.y + blockIdx.y;
    __threadfence();  // release: this CTA's partials before its arrival
    const bool last = atomicAdd(counter, 1u) == static_cast<unsigned int>(used - 1);
    if (last) {
      *counter = 0u;
      __threadfence();  // acquire: the earlier arrivals' partials are read after their count
    }
    s_last = last;
  }
  __syncthreads();
  if (s_last) merge_partials<scalar_t, HEAD_DIM, GT>(p, t, h0, used, out, smem);
}

// The smallest partition: kMinChunk, or VGRAPH_ATTN_MIN_CHUNK (a multiple of 16, for
// measurements): short contexts cost a merge when split, long ones need the parallelism.
int min_chunk() {
  const int n = env_int("VGRAPH_ATTN_MIN_CHUNK", kMinChunk, 16, kMaxChunk);
  TORCH_CHECK(n % 16 == 0, "VGRAPH_ATTN_MIN_CHUNK must be a multiple of 16, got ", n);
  return n;
}

// Number of partitions, from static sizes only (num_tokens, head groups, block_table width, SM
// occupancy): enough CTAs to fill half the resident slots when the batch is small (measured on
// H200: a full wave of shorter partitions loses to half a wave of longer ones), long contexts cut
// into pieces of at most kMaxChunk, no piece shorter than min_chunk, partials bounded in memory.
int choose_num_parts(const AttentionShape& s, int64_t num_groups, int64_t resident_ctas,
                     int64_t min_chunk) {
  const int64_t pairs = s.num_tokens * num_groups;
  const int64_t max_ctx = s.max_blocks_per_req * s.block_size;
  const int64_t part_bytes = s.num_tokens * s.num_heads * (s.head_dim + 2) * 4;
  int64_t np = std::max(resident_ctas / (2 * pairs), (max_ctx + kMaxChunk - 1) / kMaxChunk);
  np = std::min({np, (max_ctx + min_chunk - 1) / min_chunk,
                 kMaxWorkspaceBytes / std::max<int64_t>(part_bytes, 1),
                 static_cast<int64_t>(kMaxParts)});
  return static_cast<int>(std::max<int64_t>(np, 1));
}

// The arrival counters of the partition merge on `device`, at least n of them, all zero.
//
// Invariant: every counter is zero whenever no paged_attention launch is running on the device.
// A buffer starts zeroed, and each launch returns the counters it used to zero (the merging CTA
// resets its own), so one buffer per device serves every call, eager or replayed from a CUDA
// graph, in any order, provided the calls on a device are stream-ordered (one stream, or streams
// joined by events), which is how the engine runs a step: two launches running at once would
// share counters. The buffer grows, never shrinks, and a replaced buffer is never freed: a graph
// captured earlier keeps its address, and its counters stay zero between launches like any
// other's. Growth may happen during a capture, so it is done outside the stream order: cudaMalloc
// in relaxed capture mode, zeroed on a private stream and synchronised before the kernel using it
// is launched (or replayed), never as a captured node.
unsigned int* merge_counters(c10::DeviceIndex device, int64_t n) {
  struct Buffer {
    unsigned int* ptr = nullptr;
    int64_t size = 0;
  };
  static std::mutex mutex;
  static std::vector<Buffer> buffers(c10::cuda::device_count());
  const std::lock_guard<std::mutex> lock(mutex);
  Buffer& b = buffers.at(device);
  if (b.size < n) {
    const int64_t size = std::max({n, 2 * b.size, kMinCounters});
    const size_t bytes = static_cast<size_t>(size) * sizeof(unsigned int);
    const c10::cuda::CUDAStreamCaptureModeGuard relaxed(cudaStreamCaptureModeRelaxed);
    void* ptr = nullptr;
    C10_CUDA_CHECK(cudaMalloc(&ptr, bytes));
    cudaStream_t side = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    C10_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, side));
    C10_CUDA_CHECK(cudaStreamSynchronize(side));
    C10_CUDA_CHECK(cudaStreamDestroy(side));
    b = Buffer{static_cast<unsigned int*>(ptr), size};  // the old one stays allocated (above)
  }
  return b.ptr;
}

template <typename scalar_t, int HEAD_DIM, int GT>
void launch(const AttentionShape& s, AttnParams p, const at::Tensor& query, cudaStream_t stream) {
  using Cfg = AttnCfg<scalar_t, HEAD_DIM, GT>;
  auto kernel = paged_attention_kernel<scalar_t, HEAD_DIM, GT>;
  // once per instantiation (and device: vgraph runs one device per process): the host cost of
  // an eager call matters, it runs between the captured pieces of every layer
  static const int64_t resident_ctas = [&] {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        Cfg::kSmemBytes));
    int per_sm = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads,
                                                                 Cfg::kSmemBytes));
    return static_cast<int64_t>(std::max(per_sm, 1)) * num_sms();
  }();
  const int64_t num_groups = s.num_heads / GT;
  p.one_part = env_int("VGRAPH_ATTN_ONE_PART_ITERS", kOnePartIters, 0, 64) * Cfg::kTokensPerIter;
  p.num_parts = choose_num_parts(s, num_groups, resident_ctas, p.min_chunk);
  at::Tensor workspace;  // one allocation for the partials: static sizes for a given shape
  if (p.num_parts > 1) {
    const int64_t rows = s.num_tokens * s.num_heads * p.num_parts;
    const auto f32 = query.options().dtype(at::kFloat);
    workspace = at::empty({rows * (HEAD_DIM + 2)}, f32);
    float* base = workspace.data_ptr<float>();
    p.part_out = base;                                             // rows * HEAD_DIM floats
    p.part_ml = reinterpret_cast<float2*>(base + rows * HEAD_DIM);  // rows float2, 8-aligned
    p.counters = merge_counters(query.device().index(), s.num_tokens * num_groups);
  }
  const dim3 grid(static_cast<unsigned>(s.num_tokens), static_cast<unsigned>(num_groups),
                  static_cast<unsigned>(p.num_parts));
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      pdl::launch_config(grid, dim3(kThreads), Cfg::kSmemBytes, stream, attr);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

// Query heads per CTA, at most. A CTA computes its heads' scores side by side: grouping reads K/V
// once per group but lengthens each CTA's critical path. Where the grouped grid would fill at most
// an eighth of the SMs (8 * num_tokens * num_kv_heads <= SMs: one or two tokens with 8 kv heads
// on an H200), the step waits on that path, and a CTA takes one head; else as many as the GQA
// ratio allows. H200, attention's share of a FULL decode step
// (benchmarks/results/2026-12-03-h200-attn-groups/): at one token one head a CTA took
// Llama-3.2-1B from 141 to 83 us (128 positions of context) and 160 to 147 us (1,024),
// Qwen3-0.6B from 370 to 326 us (1,024); at two tokens and 1,024 positions the step gained 20-37
// us; at 4 tokens it gained 9-10 us of attention at 128 positions and lost 3-21 at 1,024, at 8
// and 16 tokens up to 152 at 1,024. VGRAPH_ATTN_GROUP_HEADS (1 to 8, for measurements) replaces
// the rule by that cap.
int max_group_heads(const AttentionShape& s) {
  const int cap = env_int("VGRAPH_ATTN_GROUP_HEADS", 0, 1, kMaxGroupHeads);
  if (cap > 0) return cap;
  return 8 * s.num_tokens * s.num_kv_heads <= num_sms() ? 1 : kMaxGroupHeads;
}

template <typename scalar_t, int HEAD_DIM>
void dispatch_group(const AttentionShape& s, const AttnParams& p, const at::Tensor& query,
                    cudaStream_t stream) {
  // GT = the largest of 8, 4, 2, 1 dividing the GQA ratio and at most max_group_heads(): K/V are
  // read once per GT query heads, and a CTA computes its GT heads' scores side by side.
  const int cap = max_group_heads(s);
  if (p.group % 8 == 0 && cap >= 8) return launch<scalar_t, HEAD_DIM, 8>(s, p, query, stream);
  if (p.group % 4 == 0 && cap >= 4) return launch<scalar_t, HEAD_DIM, 4>(s, p, query, stream);
  if (p.group % 2 == 0 && cap >= 2) return launch<scalar_t, HEAD_DIM, 2>(s, p, query, stream);
  return launch<scalar_t, HEAD_DIM, 1>(s, p, query, stream);
}

template <typename scalar_t>
void dispatch_head_dim(const AttentionShape& s, const AttnParams& p, const at::Tensor& query,
                       cudaStream_t stream) {
  if (s.head_dim == 64) return dispatch_group<scalar_t, 64>(s, p, query, stream);
  return dispatch_group<scalar_t, 128>(s, p, query, stream);
}

// The append's rows can be read with 16-byte cp.async copies (else: a separate cache write).
bool rows_aligned16(const at::Tensor& t) {
  const int64_t vec = 16 / t.element_size();
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(0) % vec == 0 &&
         t.stride(1) % vec == 0;
}

void paged_attention_cuda(at::Tensor& out, const at::Tensor& query, at::Tensor& key_cache,
                          at::Tensor& value_cache, const at::Tensor& query_start_loc,
                          const at::Tensor& seq_lens, const at::Tensor& block_table, double scale,
                          std::optional<int64_t> num_reqs, const std::optional<at::Tensor>& key,
                          const std::optional<at::Tensor>& value,
                          const std::optional<at::Tensor>& slot_mapping) {
  const AttentionShape s = check_paged_attention(out, query, key_cache, value_cache,
                                                 query_start_loc, seq_lens, block_table, num_reqs);
  const bool append = check_append(s, key, value, slot_mapping, key_cache, value_cache);
  TORCH_CHECK(s.head_dim == 64 || s.head_dim == 128, "CUDA paged_attention supports head_dim 64 "
              "and 128, got ", s.head_dim);
  TORCH_CHECK(s.block_size >= 8, "CUDA paged_attention needs block_size >= 8, got ", s.block_size);
  TORCH_CHECK(s.num_tokens <= INT32_MAX && s.max_blocks_per_req * s.block_size <= INT32_MAX,
              "paged_attention sizes exceed int32");
  if (s.num_tokens == 0) return;
  const c10::cuda::CUDAGuard guard(query.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const bool fused_append = append && rows_aligned16(*key) && rows_aligned16(*value);
  if (append && !fused_append) {
    reshape_and_cache_cuda(*key, *value, key_cache, value_cache, *slot_mapping);
  }

  AttnParams p{};
  p.out = out.data_ptr();
  p.query = query.data_ptr();
  p.key_cache = key_cache.data_ptr();
  p.value_cache = value_cache.data_ptr();
  p.query_start_loc = query_start_loc.data_ptr<int>();
  p.seq_lens = seq_lens.data_ptr<int>();
  p.block_table = block_table.data_ptr<int>();
  p.q_tok_stride = query.stride(0);
  p.q_head_stride = query.stride(1);
  p.o_tok_stride = out.stride(0);
  p.o_head_stride = out.stride(1);
  p.bt_stride = block_table.stride(0);
  p.num_heads = static_cast<int>(s.num_heads);
  p.num_kv_heads = static_cast<int>(s.num_kv_heads);
  p.num_reqs = static_cast<int>(s.num_reqs);
  p.max_blocks = static_cast<int>(s.max_blocks_per_req);
  p.log2_block_size = __builtin_ctzll(static_cast<uint64_t>(s.block_size));
  p.group = static_cast<int>(s.num_heads / s.num_kv_heads);
  p.scale_log2 = static_cast<float>(scale) * 1.4426950408889634f;
  p.min_chunk = min_chunk();
  // Request t's first block ids loaded with the request lookup (default; 0 for comparisons,
  // read at each call, so a graph keeps what it was captured with).
  p.guess_blocks = env_int("VGRAPH_ATTN_GUESS_BLOCKS", 1, 0, 1);
  if (fused_append) {
    p.key = key->data_ptr();
    p.value = value->data_ptr();
    p.slot_mapping = slot_mapping->data_ptr<int64_t>();
    p.k_tok_stride = key->stride(0);
    p.k_head_stride = key->stride(1);
    p.v_tok_stride = value->stride(0);
    p.v_head_stride = value->stride(1);
  }

  switch (query.scalar_type()) {
    case at::kFloat: return dispatch_head_dim<float>(s, p, query, stream);
    case at::kHalf: return dispatch_head_dim<c10::Half>(s, p, query, stream);
    case at::kBFloat16: return dispatch_head_dim<c10::BFloat16>(s, p, query, stream);
    default: TORCH_CHECK(false, "CUDA paged_attention supports float32/float16/bfloat16, got ",
                         query.scalar_type());
  }
}

}  // namespace
}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CUDA, m) { m.impl("paged_attention", &vgraph::paged_attention_cuda); }

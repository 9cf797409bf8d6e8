// The fused decode ops on CUDA (the kernels themselves: decode_gemv.h / .cuh / _mma.cuh): for
// num_tokens <= a per-shape threshold (at most kMaxGemvTokens) one kernel, a GEMV on CUDA cores or,
// from a per-shape token count on, on tensor cores (decode_gemv_mma.cuh), with the op's neighbours
// fused in as a prologue (RMSNorm) and an epilogue (store / residual add / SiLU-mul / bias + RoPE);
// above the threshold, for float32 and for unaligned inputs, the unfused sequence
// (decode_common.h: norm kernel, cuBLAS, rope / silu).
//
// CUDA-core kernel shape: 128 threads (at one token just enough whole warps to cover K,
// gemv_threads) compute kRows = 2 output rows (a row pair for the paired epilogues: gate row i
// with up row I + i; rotate-half partners j and j + head_size / 2 of a head) for every token; at
// one token a CTA takes several such pairs where the grid would be large (pairs_per_cta), and a
// smaller grid loops over the CTAs' groups where they exceed one wave or the matrix is small
// (gemv_loop_kernel, loop_grid). The
// threads split K (16-byte vectors, so no cross-CTA split-K and no second launch), each keeps its
// first kPreload weight vectors of both rows in registers, loaded BEFORE `griddepcontrol.wait`:
// launched with programmatic stream serialization (PDL), the weight stream overlaps the previous
// kernel's tail; so do the norm weight, the bias and the cos / sin rows. Activations and the
// residual are read after the wait, together (L1/L2 hits, every CTA reads the same [M, K]); fp32
// accumulation; a warp-shuffle (+ shared-memory) reduction; thread m writes token m's two outputs.
// The grid depends only on N and K, the block on K and the token count, the template on the padded
// token count: graph-safe. Numerics: the rounding points of the unfused layers are kept
// (projection rounded, then the epilogue in float32 rounded once), so results differ from the
// unfused path by fp32 summation order; except the residual ops, whose unfused form is one GEMM
// accumulating into the residual (beta = 1: no separate add launch) and so skips the projection's
// rounding, and the norm ops, which round norm_weight * x once and scale the sums by 1 / rms
// (GemvArgs::norm_scaled) where RMSNorm rounds x * inv_rms, then its product with the weight.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/macros/Macros.h>
#include <torch/library.h>

#include "argmax.h"
#include "common.h"
#include "decode_common.h"
#include "decode_gemv.h"
#include "decode_ops.h"
#include "device_info.cuh"
#include "layers.h"

namespace vgraph {
namespace {

using namespace gemv;  // NOLINT: this file is gemv's only client

// Per epilogue and [N, K]: the largest token count for which a fused kernel beats the unfused
// sequence (norm kernel, cuBLAS, rope / silu / add kernel), and the smallest at which the
// tensor-core kernel beats the CUDA-core one. Measured on an H200, bf16, chained inside a CUDA
// graph with PDL (benchmarks/bench_decode_kernels.py). The CUDA-core kernel's cost grows with every
// token (an FMA per weight per token), the tensor-core kernel's barely does. At one token the
// residual ops keep the CUDA-core kernel although the chained benchmark favours the tensor-core one
// for three shapes: in the Llama-3.2-1B decode step that choice lost 0.08 ms
// (benchmarks/results/2026-12-01-h200-mma/, call 4). Shapes not measured take the CUDA-core kernel
// for one token only. Figures: SmolLM2-135M and Llama-3.2-1B from
// benchmarks/results/2026-12-02-h200-mma16/ (calls 3 and 4: the kernel benchmark's suggestions
// with the tensor-core kernel's reduction spread over its warps; Llama-3.2-1B's QKV keeps the
// unfused path at 16 tokens, where the suggestion's 3% per call turned into a slower layer stack),
// Qwen3-0.6B from 2026-12-02-h200-latency/call1 (the kernels before that change: conservative).
// kNormStore (the final norm + LM head) from 2026-12-02-h200-norm-head/call2: the one-token
// CUDA-core kernel with packed row pairs against the norm kernel + cuBLAS, 25.5 / 26.1 us
// (SmolLM2-135M), 128.7 / 135.8 (Llama-3.2-1B), 89.4 / 87.2 (Qwen3-0.6B); from two tokens on
// cuBLAS wins for all three. With its grid looping over the row pairs (2026-12-03-h200-gemv-loop,
// call 1) the kernel takes 21.8 / 124.9 / 78.5 us, so Qwen3-0.6B's one token moved to it too.
// `loop`: whether the one-token CUDA-core kernel may loop a smaller grid over its row pairs
// (loop_grid in decode_gemv.cuh). Llama-3.2-1B's gate/up (since on the wide kernel, below) and
// final norm + LM head may not: alone, chained, they loop 2.2-2.4 and 6-7 us a call faster, but
// in the decode step the GPU was busy 0, 25 and 23 us longer with both looping than with
// neither, and 14 with the LM head alone (2026-12-03-h200-gemv-loop, calls 1, 2, 4 and 3). Nor
// may its QKV: its batch-1 step was 811 / 808 against 816 / 813 us busy with a CTA per pair group
// (2026-12-04-h200-norm-scaled, calls 2 and 3: the QKV 4.3 against 5.1 us a call).
// `wide_from`: the wide tensor-core kernel (decode_gemv_wide.cuh) for the norm projections of
// Llama-3.2-1B and Qwen3-0.6B from two tokens on, where it took the decode step below the table's
// earlier kernels (2026-12-03-h200-wide, call 6, each variant 300 steps in turns): Llama-3.2-1B
// 1.031 / 1.032 / 1.079 / 1.187 ms at 2 / 4 / 8 / 12 tokens against 1.042 / 1.053 / 1.101 / 1.244,
// and at 16 with gate/up alone on it 1.195 against 1.243 (QKV on it too: 1.216; Llama's gate/up
// was fused at one token only before, its QKV up to 8); Qwen3-0.6B 1.287 / 1.318 against 1.337 /
// 1.373 at 4 / 8 tokens, its fused limit (at 16 with both on it 1.557 against 1.505). SmolLM2-135M
// keeps the earlier kernels, which beat the wide one per call at every token count (call 4).
// Llama-3.2-1B's gate/up takes it at one token too: 18.3 us a call against 19.1 on CUDA cores
// (call 4), and the batch-1 step 0.989 against 0.997 ms, 814 against 823 us busy (call 9, 500
// steps a variant in turns).
// `pack`: at one token the CUDA-core kernel gives a CTA as many one-warp row pairs as fit (4 for
// SmolLM2-135M's K of 576 and 1,536's 2) rather than one: SmolLM2-135M's batch-1 step was 393
// against 416 us busy, timed in turns (2026-12-04-h200-arrival, call 7). Llama-3.2-1B's (2 a CTA)
// was within the spread (813 against 815 us), so its entries keep the earlier rule.
// `gather_up_to`: the token count up to which the tensor-core kernel stages a chunk's activations
// (GemvArgs::gather_x, below). SmolLM2-135M's O and down projections load them where they are
// used at 9-16 tokens: its batch-16 step was 518.9 / 522.7 against 529.8 / 531.1 us busy, 0.675 /
// 0.590 against 0.687 / 0.596 ms in turns (2026-12-05-h200-wide-trigger call 1, 2026-12-04-h200-
// gather call 2).
// `trigger_left`: the wide kernel lets the next kernel start once each warp has this many weight
// chunks left (GemvArgs::wide_trigger_left; 0: after its loop). Llama-3.2-1B's gate/up at 7 (the
// ring's depth less one: once its last load is issued): the down projection after it 7.5 against
// 9.3 us, the gate/up 22.3 against 20.9, the batch-1 step 809.1 against 815.0 us busy and 0.944
// against 0.948 ms in turns, the engine loop 0.820 against 0.825; at 16 tokens within the spread
// (1045.4 against 1044.6 us busy; 2026-12-05-h200-wide-trigger, call 1).
struct Threshold {
  Epilogue e;
  int64_t n, k, max_tokens, mma_from;
  bool loop = true;
  int64_t wide_from = 0;  // the token count from which the wide tensor-core kernel runs; 0: never
  bool pack = false;      // at one token, as many row pairs a CTA as fit (pairs_per_cta)
  int64_t gather_up_to = kMaxGemvTokens;
  int trigger_left = 0;
};
constexpr Threshold kThresholds[] = {
    // SmolLM2-135M
    {Epilogue::kQkvRope, 960, 576, 16, 4, true, 0, true},
    {Epilogue::kAddResidual, 576, 576, 16, 4, true, 0, true, 8},
    {Epilogue::kSiluMul, 3072, 576, 32, 2, true, 0, true},
    {Epilogue::kAddResidual, 576, 1536, 32, 2, true, 0, true, 8},
    {Epilogue::kStore, 49152, 576, 0, 1},
    {Epilogue::kNormStore, 49152, 576, 1, 2},
    // Llama-3.2-1B
    {Epilogue::kQkvRope, 3072, 2048, 12, 2, false, 2},
    {Epilogue::kAddResidual, 2048, 2048, 16, 4},
    {Epilogue::kSiluMul, 16384, 2048, 16, 2, false, 1, false, kMaxGemvTokens, 7},
    {Epilogue::kAddResidual, 2048, 8192, 8, 2},
    {Epilogue::kStore, 128256, 2048, 2, 4},
    {Epilogue::kNormStore, 128256, 2048, 1, 2, false},
    // Qwen3-0.6B
    {Epilogue::kQkvRope, 4096, 1024, 8, 2, true, 2},
    {Epilogue::kAddResidual, 1024, 2048, 16, 4},
    {Epilogue::kSiluMul, 6144, 1024, 8, 2, true, 2},
    {Epilogue::kAddResidual, 1024, 3072, 16, 4},
    {Epilogue::kStore, 151936, 1024, 8, 1},
    {Epilogue::kNormStore, 151936, 1024, 1, 2},
};

const Threshold* find_threshold(Epilogue e, int64_t n, int64_t k) {
  for (const Threshold& t : kThresholds) {
    if (t.e == e && t.n == n && t.k == k) return &t;
  }
  return nullptr;
}

// VGRAPH_GEMV_MAX_TOKENS_<OP>=n replaces the table's max_tokens for every shape of one epilogue
// (comparisons; read at each launch, so a graph keeps what it was captured with).
const char* max_tokens_switch(Epilogue e) {
  switch (e) {
    case Epilogue::kQkvRope: return "VGRAPH_GEMV_MAX_TOKENS_QKV";
    case Epilogue::kAddResidual: return "VGRAPH_GEMV_MAX_TOKENS_RESIDUAL";
    case Epilogue::kSiluMul: return "VGRAPH_GEMV_MAX_TOKENS_GATE_UP";
    case Epilogue::kStore: return "VGRAPH_GEMV_MAX_TOKENS_OUT";
    case Epilogue::kNormStore: return "VGRAPH_GEMV_MAX_TOKENS_NORM_OUT";
  }
  return "";
}

// An op's own switch: `stem` followed by the op's name in max_tokens_switch (QKV, RESIDUAL, ...).
std::string op_switch(const char* stem, Epilogue e) {
  constexpr size_t kPrefix = sizeof("VGRAPH_GEMV_MAX_TOKENS_") - 1;  // then the op's name
  return std::string(stem) + (max_tokens_switch(e) + kPrefix);
}

int64_t default_max_gemv_tokens(Epilogue e, int64_t n, int64_t k) {
  const Threshold* t = find_threshold(e, n, k);
  return env_int(max_tokens_switch(e), t ? static_cast<int>(t->max_tokens) : 1, 0,
                 kMaxGemvTokens);
}

// Whether a fused kernel takes this call (else the unfused path does).
bool use_gemv(Epilogue e, const at::Tensor& x, const at::Tensor& weight,
              const at::Tensor* norm_weight, std::optional<int64_t> max_gemv_tokens) {
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  const int64_t limit = max_gemv_tokens.value_or(default_max_gemv_tokens(e, n, k));
  const auto dt = x.scalar_type();
  return m >= 1 && m <= std::min<int64_t>(limit, kMaxGemvTokens) &&
         (dt == at::kHalf || dt == at::kBFloat16) && k % 8 == 0 && x.stride(0) % 8 == 0 &&
         aligned16(x.data_ptr()) && aligned16(weight.data_ptr()) &&
         (norm_weight == nullptr || aligned16(norm_weight->data_ptr())) && n < (1LL << 31) &&
         k < (1LL << 31);
}

// Which fused kernel: the wide tensor-core one from the shape's measured token count on, else the
// tensor-core one from its own, where they fit; else the CUDA-core one. VGRAPH_GEMV=cuda_core, =mma
// or =wide forces one (the tensor-core ones only where they fit), for comparisons; read at each
// launch, so a graph keeps the kernel it was captured with.
enum class Kernel { kCudaCore, kMma, kWide };
Kernel pick_kernel(Epilogue e, int64_t m, int64_t n, int64_t k, int64_t head_size) {
  if (!mma_fits(e, n, k, head_size)) return Kernel::kCudaCore;
  const char* force = std::getenv("VGRAPH_GEMV");
  if (force != nullptr && force[0] != '\0') {
    if (std::strcmp(force, "wide") == 0) return Kernel::kWide;
    if (std::strcmp(force, "mma") == 0) return Kernel::kMma;
    if (std::strcmp(force, "cuda_core") == 0) return Kernel::kCudaCore;
    TORCH_CHECK(false, "VGRAPH_GEMV must be cuda_core, mma or wide, got ", force);
  }
  const Threshold* t = find_threshold(e, n, k);
  // VGRAPH_GEMV_WIDE_FROM_<OP>=n replaces the table's wide_from for every shape of one epilogue
  // (0: never; comparisons).
  const std::string name = op_switch("VGRAPH_GEMV_WIDE_FROM_", e);
  const int wide_from =
      env_int(name.c_str(), t ? static_cast<int>(t->wide_from) : 0, 0, kMaxGemvTokens);
  if (wide_from > 0 && m >= wide_from) return Kernel::kWide;
  if (t == nullptr) return Kernel::kCudaCore;
  // VGRAPH_GEMV_MMA_FROM_<OP>=n replaces the table's mma_from likewise (comparisons).
  const int mma_from = env_int(op_switch("VGRAPH_GEMV_MMA_FROM_", e).c_str(),
                               static_cast<int>(t->mma_from), 1, kMaxGemvTokens + 1);
  return m >= mma_from ? Kernel::kMma : Kernel::kCudaCore;
}

// The chosen fused kernel on a's shape (the wide kernel falls back to the tensor-core one where it
// does not fit).
// Returns whether the kernel wrote call.greedy (launch_gemv).
template <typename T, Epilogue E>
bool launch_fused(const GemvArgs<T>& call, int num_pairs, cudaStream_t stream) {
  GemvArgs<T> a = call;
  const Threshold* t = find_threshold(E, a.N, a.K);
  // The norm ops scale the sums by 1 / rms (GemvArgs::norm_scaled) rather than normalize x before
  // the first product: no pass over the activations and no reduction ahead of the dot products.
  // SmolLM2-135M's decode step took 365 against 388 us of GPU time at one token, 554 against 577
  // at 16; Llama-3.2-1B's (whose norm ops at 1 and 16 tokens are mostly on the wide kernel or
  // unfused) moved within the spread (2026-12-04-h200-norm-scaled, call 1).
  // Switches for comparisons, read at each launch (a graph keeps what it was captured with):
  // VGRAPH_GEMV_NORM_SCALED=0 normalizes x first (RMSNorm's roundings) at every shape;
  // VGRAPH_PDL_MAX_MIB=n launches a GEMV over more than n MiB of weights without programmatic
  // stream serialization (Llama-3.2-1B's step lost 23-99 us with it at n = 48 / 16 / 4, call 1).
  a.norm_scaled = env_int("VGRAPH_GEMV_NORM_SCALED", 1, 0, 1) == 1;
  const int64_t weight_bytes = static_cast<int64_t>(a.N) * a.K * sizeof(T);
  a.pdl = weight_bytes <= static_cast<int64_t>(env_int("VGRAPH_PDL_MAX_MIB", 1 << 20, 0, 1 << 20))
                              << 20;
  // The weight loads carry an L2 evict-first policy: the weights stream through L2 once a step,
  // and their lines give way to the KV cache's and the activations'. SmolLM2-135M's batch-1 step
  // took 365 against 385 us of GPU time, Llama-3.2-1B's 813-816 against 821-825 at one token and
  // 1058 against 1065 at 16 (2026-12-04-h200-evict-first, calls 2 and 3); SmolLM2-135M's batch 16
  // within the spread. VGRAPH_GEMV_L2_EVICT_FIRST=0 leaves the loads unhinted (comparisons).
  a.l2_evict_first = env_int("VGRAPH_GEMV_L2_EVICT_FIRST", 1, 0, 1) == 1;
  // The tensor-core kernel up to 16 tokens copies a chunk's activations to shared memory
  // together and waits for them once (GemvArgs::gather_x): loaded where they are used, each
  // vector of a chunk was a round trip to L2 of its own (1 a chunk up to 8 tokens, now 1 for every
  // 2 chunks; 5 for every 2 chunks at 9-16, Llama-3.2-1B's O at 16: 10, now 4). On an H200 the
  // engine loop's step took 0.531 against 0.560-0.562 ms at SmolLM2-135M's batch 16, 1.072-1.078
  // against 1.079-1.087 at Llama-3.2-1B's (2026-12-04-h200-gather, calls 1 and 2). (The
  // CUDA-core kernel's version at one token took Llama-3.2-1B's LM head 416 against 133 us:
  // removed.) The table's gather_up_to limits it per shape. VGRAPH_GEMV_GATHER=0 / 1 forbids /
  // allows it at every shape, VGRAPH_GEMV_GATHER_<OP>=0 / 1 for one op only (comparisons; read at
  // each launch).
  const bool table_gather = t == nullptr || a.num_tokens <= t->gather_up_to;
  const int gather = env_int("VGRAPH_GEMV_GATHER", table_gather ? 1 : 0, 0, 1);
  a.gather_x = env_int(op_switch("VGRAPH_GEMV_GATHER_", E).c_str(), gather, 0, 1) == 1;
  const Kernel kernel = pick_kernel(E, a.num_tokens, a.N, a.K, a.head_size);
  if (kernel == Kernel::kWide) {
    // When it lets the next kernel start: the table's trigger_left. VGRAPH_WIDE_LATE_TRIGGER=0
    // lets it in at once, VGRAPH_WIDE_TRIGGER_LEFT=n once each warp has n chunks left, 0 after
    // the loop, at every shape (comparisons; read at each launch).
    a.wide_trigger_left =
        env_int("VGRAPH_WIDE_LATE_TRIGGER", 1, 0, 1) == 0
            ? -1
            : env_int("VGRAPH_WIDE_TRIGGER_LEFT", t == nullptr ? 0 : t->trigger_left, 0, 1 << 16);
    // VGRAPH_WIDE_EARLY_REFILL=1: each warp issues the chunk its loop's first iteration would,
    // right after its wait, ahead of the activations (GemvArgs::wide_early_refill; bit-equal).
    // Default off: Llama-3.2-1B's batch-1 step took 1.066 against 1.057 ms with it on an H100
    // (benchmarks/results/2026-12-05-h200-fold-argmax/, call 1).
    a.wide_early_refill = env_int("VGRAPH_WIDE_EARLY_REFILL", 0, 0, 1) == 1;
    // VGRAPH_WIDE_PACKED=0: the row-major weight though the op was given a packed one
    // (comparisons; read at each launch).
    if (env_int("VGRAPH_WIDE_PACKED", 1, 0, 1) == 0) a.wide_packed = nullptr;
    if (launch_gemv_wide<T, E>(a, stream)) return false;
  }
  if (kernel != Kernel::kCudaCore) {
    // The QKV and residual-add (O, down) projections up to 8 tokens give each chunk of K a warp
    // where it fits (mma_warps: K of 5-16 chunks, SmolLM2-135M's QKV and O). On an H200
    // SmolLM2-135M's decode step took 0.489 against 0.537 ms at batch 4 and 0.523-0.544 against
    // 0.562-0.564 at 8; Llama-3.2-1B's (K = 2,048: the rule's warps) within 0.003; at 16 tokens
    // it lost 0.056 ms (attention after the QKV slower; 2026-12-04-h200-gather, calls 1 and 2).
    // VGRAPH_MMA_WARP_PER_CHUNK_<OP>=0 / 1 forbids / allows it for one op at every token count
    // (comparisons, read at each launch).
    const bool wpc = (E == Epilogue::kQkvRope || E == Epilogue::kAddResidual) && a.num_tokens <= 8;
    a.warp_per_chunk =
        env_int(op_switch("VGRAPH_MMA_WARP_PER_CHUNK_", E).c_str(), wpc ? 1 : 0, 0, 1) == 1;
    launch_gemv_mma<T, E>(a, stream);
    return false;
  }
  // VGRAPH_GEMV_LOOP=0 / 1 forbids / allows it at every shape (comparisons; read at each launch).
  a.may_loop = env_int("VGRAPH_GEMV_LOOP", t == nullptr || t->loop ? 1 : 0, 0, 1) == 1;
  // VGRAPH_GEMV_PACK=0 / 1 forbids / allows the table's packing at every shape (comparisons).
  a.pack_pairs = env_int("VGRAPH_GEMV_PACK", t != nullptr && t->pack ? 1 : 0, 0, 1) == 1;
  return launch_gemv<T, E>(a, num_pairs, stream);
}

template <typename T>
GemvArgs<T> base_args(const at::Tensor& x, const at::Tensor& weight) {
  GemvArgs<T> a = {};
  a.x = static_cast<const T*>(x.data_ptr());
  a.x_stride = x.stride(0);
  a.weight = static_cast<const T*>(weight.data_ptr());
  a.num_tokens = static_cast<int>(x.size(0));
  a.K = static_cast<int>(x.size(1));
  a.N = static_cast<int>(weight.size(0));
  return a;
}

#define VGRAPH_DISPATCH_16BIT(TYPE, NAME, ...)                   \
  AT_DISPATCH_SWITCH(TYPE, NAME, AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__) \
                                     AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

// a.wide_packed from an op's wide_packed argument, checked to be pack_wide_weight's output for
// a.weight and epilogue E.
template <typename T, Epilogue E>
void set_wide_packed(GemvArgs<T>& a, const at::Tensor& weight,
                     const std::optional<at::Tensor>& packed) {
  if (!packed) return;
  const int64_t numel = wide_packed_numel<T, E>(a);
  TORCH_CHECK(packed->dim() == 1 && packed->is_contiguous() && packed->numel() == numel,
              "wide_packed must be pack_wide_weight's output for this weight: contiguous [", numel,
              "], got ", packed->sizes());
  TORCH_CHECK(packed->scalar_type() == weight.scalar_type() && packed->device() == weight.device(),
              "wide_packed must have weight's dtype and device");
  a.wide_packed = static_cast<const T*>(packed->data_ptr());
}

template <Epilogue E>
at::Tensor pack_wide_as(const at::Tensor& weight, int64_t head_size) {
  at::Tensor out;
  VGRAPH_DISPATCH_16BIT(weight.scalar_type(), "pack_wide_weight", [&] {
    GemvArgs<scalar_t> a = {};
    a.weight = static_cast<const scalar_t*>(weight.data_ptr());
    a.N = static_cast<int>(weight.size(0));
    a.K = static_cast<int>(weight.size(1));
    a.head_size = static_cast<int>(head_size);
    out = at::empty({wide_packed_numel<scalar_t, E>(a)}, weight.options());
    pack_wide<scalar_t, E>(a, static_cast<scalar_t*>(out.data_ptr()),
                           c10::cuda::getCurrentCUDAStream());
  });
  return out;
}

// The epilogue named by pack_wide_weight's and wide_gemv_from's `epilogue`: "gate_up" (W = gate
// rows | up rows), "qkv" (rotate-half pairs of head_size heads) or "plain".
Epilogue wide_epilogue(c10::string_view epilogue) {
  TORCH_CHECK(epilogue == "gate_up" || epilogue == "qkv" || epilogue == "plain",
              "epilogue must be 'gate_up', 'qkv' or 'plain', got '", epilogue, "'");
  return epilogue == "gate_up" ? Epilogue::kSiluMul
         : epilogue == "qkv"   ? Epilogue::kQkvRope
                               : Epilogue::kAddResidual;
}

// The wide kernel's packed copy of weight [N, K] (16-bit, contiguous) for the epilogue named
// (head_size: a "qkv" weight's heads); any shape the tensor-core kernels take.
at::Tensor pack_wide_weight_cuda(const at::Tensor& weight, c10::string_view epilogue,
                                 int64_t head_size) {
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous(), "weight must be contiguous [N, K], got ",
              weight.sizes());
  TORCH_CHECK(weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16,
              "weight must be float16 or bfloat16, got ", weight.scalar_type());
  const Epilogue e = wide_epilogue(epilogue);
  TORCH_CHECK(mma_fits(e, weight.size(0), weight.size(1), head_size) &&
                  (e != Epilogue::kQkvRope || weight.size(0) % head_size == 0),
              "pack_wide_weight: no tensor-core tiling of a ", epilogue, " weight ", weight.sizes(),
              " with head_size ", head_size);
  const c10::cuda::CUDAGuard guard(weight.device());
  if (e == Epilogue::kSiluMul) return pack_wide_as<Epilogue::kSiluMul>(weight, 0);
  if (e == Epilogue::kQkvRope) return pack_wide_as<Epilogue::kQkvRope>(weight, head_size);
  return pack_wide_as<Epilogue::kAddResidual>(weight, 0);
}

// The token count from which the fused op of this weight's shape runs the wide kernel by default
// (the per-shape table's wide_from, or VGRAPH_GEMV_WIDE_FROM_<OP>), 0 where it never does: before
// sm_90, shapes the tensor-core tiling does not take, wide_from past the op's fused limit.
int64_t wide_gemv_from_cuda(const at::Tensor& weight, c10::string_view epilogue,
                            int64_t head_size) {
  TORCH_CHECK(weight.dim() == 2, "weight must be [N, K], got ", weight.sizes());
  const Epilogue e = wide_epilogue(epilogue);
  const int64_t n = weight.size(0), k = weight.size(1);
  if (compute_major(weight.device().index()) < 9 || !mma_fits(e, n, k, head_size)) return 0;
  const Threshold* t = find_threshold(e, n, k);
  const int from = env_int(op_switch("VGRAPH_GEMV_WIDE_FROM_", e).c_str(),
                           t ? static_cast<int>(t->wide_from) : 0, 0, kMaxGemvTokens);
  return from > 0 && from <= default_max_gemv_tokens(e, n, k) ? from : 0;
}

using CudaPath = Unfused<CudaOps>;

// The unfused head (cuBLAS) with its greedy tokens: for a float32 out, cuBLAS's product in x's
// dtype is widened into out by the argmax kernel's pass over it (no separate widening copy).
void unfused_head_out(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight,
                      const std::optional<at::Tensor>& greedy,
                      const std::optional<at::Tensor>& greedy_state) {
  if (!greedy) return CudaPath::linear_out(out, x, weight);
  const at::Tensor* state = greedy_state ? &*greedy_state : nullptr;
  if (out.scalar_type() == x.scalar_type()) {
    at::mm_out(out, x, weight.t());
    return launch_argmax_rows(*greedy, out, nullptr, state);
  }
  // rounded to x's dtype, then widened
  launch_argmax_rows(*greedy, at::mm(x, weight.t()), &out, state);
}

template <typename T>
void set_greedy(GemvArgs<T>& a, const std::optional<at::Tensor>& greedy,
                const std::optional<at::Tensor>& greedy_state) {
  a.greedy = greedy->data_ptr<int64_t>();
  a.greedy_state = reinterpret_cast<unsigned long long*>(greedy_state->data_ptr<int64_t>());
}

void linear_out_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight,
                     std::optional<int64_t> max_gemv_tokens,
                     const std::optional<at::Tensor>& greedy,
                     const std::optional<at::Tensor>& greedy_state) {
  check_linear_out(out, x, weight);
  check_greedy(greedy, greedy_state, out);
  if (x.size(0) == 0 || weight.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  if (!use_gemv(Epilogue::kStore, x, weight, nullptr, max_gemv_tokens)) {
    return unfused_head_out(out, x, weight, greedy, greedy_state);
  }
  bool written = false;  // greedy, by the kernel's epilogue
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  VGRAPH_DISPATCH_16BIT(x.scalar_type(), "linear_out_cuda", [&] {
    GemvArgs<scalar_t> a = base_args<scalar_t>(x, weight);
    a.out = out.data_ptr();
    a.out_stride = out.stride(0);
    a.out_float = out.scalar_type() == at::kFloat;
    if (greedy) set_greedy(a, greedy, greedy_state);
    written = launch_fused<scalar_t, Epilogue::kStore>(a, (a.N + kRows - 1) / kRows, stream);
  });
  if (greedy && !written) launch_argmax_rows(*greedy, out, nullptr, &*greedy_state);
}

void rms_norm_linear_out_cuda(at::Tensor& out, const at::Tensor& hidden,
                              const at::Tensor& norm_weight, double eps, const at::Tensor& weight,
                              std::optional<int64_t> max_gemv_tokens,
                              const std::optional<at::Tensor>& greedy,
                              const std::optional<at::Tensor>& greedy_state) {
  check_rms_norm_linear_out(out, hidden, norm_weight, weight);
  check_greedy(greedy, greedy_state, out);
  if (hidden.size(0) == 0 || weight.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(hidden.device());
  if (!use_gemv(Epilogue::kNormStore, hidden, weight, &norm_weight, max_gemv_tokens)) {
    return unfused_head_out(out, CudaPath::norm(hidden, norm_weight, eps), weight, greedy,
                            greedy_state);
  }
  bool written = false;  // greedy, by the kernel's epilogue
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  VGRAPH_DISPATCH_16BIT(hidden.scalar_type(), "rms_norm_linear_out_cuda", [&] {
    GemvArgs<scalar_t> a = base_args<scalar_t>(hidden, weight);
    a.norm_weight = static_cast<const scalar_t*>(norm_weight.data_ptr());
    a.eps = static_cast<float>(eps);
    a.out = out.data_ptr();
    a.out_stride = out.stride(0);
    a.out_float = out.scalar_type() == at::kFloat;
    if (greedy) set_greedy(a, greedy, greedy_state);
    written = launch_fused<scalar_t, Epilogue::kNormStore>(a, (a.N + kRows - 1) / kRows, stream);
  });
  if (greedy && !written) launch_argmax_rows(*greedy, out, nullptr, &*greedy_state);
}

void linear_add_residual_cuda(at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
                              std::optional<int64_t> max_gemv_tokens) {
  check_linear_add_residual(residual, x, weight);
  if (x.size(0) == 0 || weight.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  if (!use_gemv(Epilogue::kAddResidual, x, weight, nullptr, max_gemv_tokens)) {
    return CudaPath::linear_add_residual(residual, x, weight);
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  VGRAPH_DISPATCH_16BIT(x.scalar_type(), "linear_add_residual_cuda", [&] {
    GemvArgs<scalar_t> a = base_args<scalar_t>(x, weight);
    a.residual = static_cast<scalar_t*>(residual.data_ptr());
    a.res_stride = residual.stride(0);
    launch_fused<scalar_t, Epilogue::kAddResidual>(a, (a.N + kRows - 1) / kRows, stream);
  });
}

void rms_norm_qkv_rope_cuda(at::Tensor& qkv, const at::Tensor& hidden,
                            const at::Tensor& norm_weight, double eps, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias,
                            const std::optional<at::Tensor>& positions,
                            const std::optional<at::Tensor>& cos_sin_cache, int64_t head_size,
                            int64_t num_heads, int64_t num_kv_heads,
                            std::optional<int64_t> max_gemv_tokens, bool unit_norm,
                            const std::optional<at::Tensor>& wide_packed) {
  check_rms_norm_qkv_rope(qkv, hidden, norm_weight, weight, bias, positions, cos_sin_cache,
                          head_size, num_heads, num_kv_heads);
  if (hidden.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(hidden.device());
  if (!use_gemv(Epilogue::kQkvRope, hidden, weight, &norm_weight, max_gemv_tokens)) {
    return CudaPath::rms_norm_qkv_rope(qkv, hidden, norm_weight, eps, weight, bias, positions,
                                       cos_sin_cache, head_size, num_heads, num_kv_heads,
                                       unit_norm);
  }
  // The fused kernels multiply by norm_weight as they would by any weight (by ones: exact).
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  VGRAPH_DISPATCH_16BIT(hidden.scalar_type(), "rms_norm_qkv_rope_cuda", [&] {
    GemvArgs<scalar_t> a = base_args<scalar_t>(hidden, weight);
    a.norm_weight = static_cast<const scalar_t*>(norm_weight.data_ptr());
    a.eps = static_cast<float>(eps);
    a.out = qkv.data_ptr();
    a.out_stride = qkv.stride(0);
    a.bias = bias ? static_cast<const scalar_t*>(bias->data_ptr()) : nullptr;
    a.head_size = static_cast<int>(head_size);
    a.rope_heads = static_cast<int>(num_heads + num_kv_heads);
    if (positions) {
      if (positions->scalar_type() == at::kLong) {
        a.pos64 = positions->data_ptr<int64_t>();
      } else {
        a.pos32 = positions->data_ptr<int32_t>();
      }
      a.cos_sin = cos_sin_cache->data_ptr<float>();
      a.max_position = static_cast<int>(cos_sin_cache->size(0));
    }
    set_wide_packed<scalar_t, Epilogue::kQkvRope>(a, weight, wide_packed);
    launch_fused<scalar_t, Epilogue::kQkvRope>(a, a.N / 2, stream);
  });
}

void rms_norm_gate_up_silu_cuda(at::Tensor& out, const at::Tensor& hidden,
                                const at::Tensor& norm_weight, double eps,
                                const at::Tensor& weight, std::optional<int64_t> max_gemv_tokens,
                                const std::optional<at::Tensor>& wide_packed) {
  check_rms_norm_gate_up_silu(out, hidden, norm_weight, weight);
  if (hidden.size(0) == 0 || weight.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(hidden.device());
  if (!use_gemv(Epilogue::kSiluMul, hidden, weight, &norm_weight, max_gemv_tokens)) {
    return CudaPath::rms_norm_gate_up_silu(out, hidden, norm_weight, eps, weight);
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  VGRAPH_DISPATCH_16BIT(hidden.scalar_type(), "rms_norm_gate_up_silu_cuda", [&] {
    GemvArgs<scalar_t> a = base_args<scalar_t>(hidden, weight);
    a.norm_weight = static_cast<const scalar_t*>(norm_weight.data_ptr());
    a.eps = static_cast<float>(eps);
    a.out = out.data_ptr();
    a.out_stride = out.stride(0);
    set_wide_packed<scalar_t, Epilogue::kSiluMul>(a, weight, wide_packed);
    launch_fused<scalar_t, Epilogue::kSiluMul>(a, a.N / 2, stream);
  });
}

}  // namespace

void mlp_two_ops_cuda(at::Tensor& residual, const at::Tensor& norm_weight, double eps,
                      const at::Tensor& gate_up, const at::Tensor& down,
                      const std::optional<at::Tensor>& wide_packed) {
  at::Tensor act = at::empty({residual.size(0), down.size(1)}, residual.options());  // [M, I]
  rms_norm_gate_up_silu_cuda(act, residual, norm_weight, eps, gate_up, std::nullopt, wide_packed);
  linear_add_residual_cuda(residual, act, down, std::nullopt);
}

}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CUDA, m) {
  m.impl("linear_out", &vgraph::linear_out_cuda);
  m.impl("rms_norm_linear_out", &vgraph::rms_norm_linear_out_cuda);
  m.impl("linear_add_residual", &vgraph::linear_add_residual_cuda);
  m.impl("rms_norm_qkv_rope", &vgraph::rms_norm_qkv_rope_cuda);
  m.impl("rms_norm_gate_up_silu", &vgraph::rms_norm_gate_up_silu_cuda);
  m.impl("pack_wide_weight", &vgraph::pack_wide_weight_cuda);
  m.impl("wide_gemv_from", &vgraph::wide_gemv_from_cuda);
}

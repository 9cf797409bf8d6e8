// The GEMV kernel of the fused decode ops: its arguments, its epilogues and the launcher that
// picks the padded token count. Definitions in decode_gemv.cuh, instantiated once per epilogue in
// decode_gemv_*.cu (separate translation units so they compile in parallel); the ops that call it
// are in decode_cuda.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace vgraph {
namespace gemv {

constexpr int kThreads = 128;  // one CTA
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 2;            // output rows per CTA
constexpr int kPreload = 4;         // weight vectors per thread and row in flight at once
constexpr int kMaxGemvTokens = 32;  // the largest padded token count with a GEMV instantiation

enum class Epilogue : int { kStore, kAddResidual, kSiluMul, kQkvRope };

template <typename T>
struct GemvArgs {
  const T* x;            // [num_tokens, K], row stride x_stride
  int64_t x_stride;
  const T* weight;       // [N, K] contiguous
  const T* norm_weight;  // [K]; read only by the norm prologue (kSiluMul, kQkvRope)
  float eps;
  int num_tokens, K, N;
  void* out;             // [num_tokens, >= N], row stride out_stride; T, or float if out_float
  int64_t out_stride;
  bool out_float;
  T* residual;           // kAddResidual: [num_tokens, N], row stride res_stride
  int64_t res_stride;
  const T* bias;         // kQkvRope: [N] or nullptr
  const int64_t* pos64;  // kQkvRope: [num_tokens], one of pos64 / pos32, or both null (no rope)
  const int32_t* pos32;
  const float* cos_sin;  // [max_position, head_size] = cos | sin
  int max_position, head_size, rope_heads;  // rope_heads = num_heads + num_kv_heads
};

// Launches the kernel for a.num_tokens in [1, kMaxGemvTokens] on `grid` CTAs, with programmatic
// stream serialization unless VGRAPH_PDL=0. T is c10::Half or c10::BFloat16.
template <typename T, Epilogue E>
void launch_gemv(const GemvArgs<T>& a, int grid, cudaStream_t stream);

}  // namespace gemv
}  // namespace vgraph

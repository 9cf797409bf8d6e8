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

// kNormStore is kStore with the RMSNorm prologue (the final norm and the LM head).
enum class Epilogue : int { kStore, kAddResidual, kSiluMul, kQkvRope, kNormStore };

// The epilogues whose kernels normalize x first (RMSNorm prologue with norm_weight and eps).
constexpr bool has_norm(Epilogue e) {
  return e == Epilogue::kSiluMul || e == Epilogue::kQkvRope || e == Epilogue::kNormStore;
}

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
  // CUDA-core kernel: whether its grid may loop over the row pairs at one token (the op's per-shape
  // table); set by its launcher, the row pairs (the grid's work) and how many of them a CTA takes,
  // each on its own whole warps (more than one only at one token).
  bool may_loop;
  // CUDA-core kernel: whether a CTA takes as many row pairs as fit it at one token whatever the
  // grid's size (the op's per-shape table; else only where a CTA per pair would overfill the SMs).
  bool pack_pairs;
  int num_pairs, pairs_per_cta;
  // Wide kernel: when a warp lets the next kernel start (set by its launcher): with this many of
  // its weight chunks left to compute (0: after its loop), or before its wait if negative.
  int wide_trigger_left;
  // Wide kernel: whether a warp issues its chunk D - 1 into the ring's free stage right after its
  // wait, ahead of the activations' staging, instead of at its loop's first iteration.
  bool wide_early_refill = false;
  // Wide kernel: the weight packed tile by tile (pack_wide_weight), or nullptr to read `weight`
  // row by row. Packed, a warp's chunk of 16 rows x kMmaK columns is one contiguous 2 KiB run laid
  // out as the ring's stage, where row-major it is 16 runs of 128 bytes, a row apart.
  const T* wide_packed = nullptr;
  // Norm ops of the CUDA-core and tensor-core kernels: the dot products take norm_weight * x
  // (rounded once) and each token's sums are scaled by its 1 / rms after the reduction, the
  // squares summed in the same pass (the wide kernel's way), instead of a pass that computes
  // 1 / rms and normalizes x before the first product (RMSNorm's two roundings).
  bool norm_scaled = false;
  // Whether the launch has programmatic stream serialization (PDL), if VGRAPH_PDL allows it.
  bool pdl = true;
  // Whether the weight loads carry an L2 evict-first policy (weight_policy in decode_gemv.cuh).
  bool l2_evict_first = false;
  // Tensor-core kernel: a warp per chunk of K where K has 5-16 chunks and the grid stays within
  // 16 warps an SM (mma_warps), in place of the rule's power of two.
  bool warp_per_chunk = false;
  // Tensor-core kernel up to 16 tokens: a chunk's activations (up to 8 tokens, those of 2 chunks)
  // are copied to shared memory by cp.async and waited for once, ahead of the chunk's products: a
  // round trip to L2 for them, where loads of each vector where it is used took one for each (a
  // branch on the token bound stands between one vector's products and the next load). Bit-equal
  // either way. The CUDA-core kernel loads each vector where it is used.
  bool gather_x = true;
  // kStore / kNormStore at one token on the looping CUDA-core kernel: the token's greedy row (the
  // index of its largest stored value, torch.argmax's choice) into greedy [1], or nullptr for none.
  // greedy_state [>= 2], zero between launches: the best key so far (greedy_key), then the count of
  // CTAs done; the last CTA writes greedy and zeroes both again.
  int64_t* greedy = nullptr;
  unsigned long long* greedy_state = nullptr;
};


// The tensor-core kernel (decode_gemv_mma.cuh): a CTA computes a tile of 16 output rows (8 row
// pairs for the paired epilogues) for up to kMaxGemvTokens tokens, its warps splitting K in chunks
// of kMmaK (kMmaVecs 16-byte vectors per lane and row); mma.sync m16n8k16, fp32 accumulation.
constexpr int kMmaRows = 16;
constexpr int kMmaVecs = 2;
constexpr int kMmaK = 32 * kMmaVecs;
constexpr int kMmaPreload = 2;  // weight chunks per warp in flight at once
constexpr int kMmaMaxWarps = 16;  // warps per CTA, at most (mma_warps)

// Whether the tensor-core kernel takes this shape: K in whole chunks, and for the paired epilogues
// row pairs that tile by 8 (gate/up halves; half a head for rotate-half RoPE).
inline bool mma_fits(Epilogue e, int64_t n, int64_t k, int64_t head_size) {
  if (k % kMmaK != 0) return false;
  if (e == Epilogue::kSiluMul) return (n / 2) % 8 == 0;
  if (e == Epilogue::kQkvRope) return (head_size / 2) % 8 == 0;
  return true;
}

// Launches the kernel for a.num_tokens in [1, kMaxGemvTokens] over `num_pairs` row pairs, with
// programmatic stream serialization unless VGRAPH_PDL=0. T is c10::Half or c10::BFloat16. Returns
// whether it wrote a.greedy (the looping kernel's epilogue; else the caller takes the argmax).
template <typename T, Epilogue E>
bool launch_gemv(const GemvArgs<T>& a, int num_pairs, cudaStream_t stream);

// Launches the tensor-core kernel for a.num_tokens in [1, kMaxGemvTokens] on a shape mma_fits
// accepts; its grid and CTA size follow from N and K alone (graph-safe).
template <typename T, Epilogue E>
void launch_gemv_mma(const GemvArgs<T>& a, cudaStream_t stream);

// Launches the wide tensor-core kernel (decode_gemv_wide.cuh: a CTA of several row tiles over
// activations staged once, K split over a thread-block cluster) on a shape mma_fits accepts, and
// returns true; false (nothing launched) where it does not fit: before sm_90, or activations too
// large for shared memory at every split.
template <typename T, Epilogue E>
bool launch_gemv_wide(const GemvArgs<T>& a, cudaStream_t stream);

// The wide kernel's packed weight (GemvArgs::wide_packed) of a.weight [a.N, a.K] for epilogue E
// (a.head_size for kQkvRope): its element count, and the kernel that writes it into out.
template <typename T, Epilogue E>
int64_t wide_packed_numel(const GemvArgs<T>& a);
template <typename T, Epilogue E>
void pack_wide(const GemvArgs<T>& a, T* out, cudaStream_t stream);

}  // namespace gemv
}  // namespace vgraph

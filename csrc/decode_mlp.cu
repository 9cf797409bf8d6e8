// rms_norm_mlp_residual on CUDA: a decoder layer's whole MLP at one token in one kernel,
// residual += down(silu_and_mul(gate_up(rms_norm(residual)))), where the fused ops take two
// (rms_norm_gate_up_silu, then linear_add_residual for the down projection).
//
// Why one kernel. At one token Llama-3.2-1B's gate/up (67 MB) and down (34 MB) projections
// streamed their 100 MB at about 80% of the bandwidth the LM head reaches: each of the two
// kernels paid its own ramp-up and tail, and the hand-over between them (the down kernel's PDL
// wait for the whole gate/up grid, the activations' round trip, the rest of its weights streamed
// after the wait) sat on the step's path, 16 times a step. Here each CTA streams its gate/up rows
// and then its down rows through one ring with no kernel boundary: the down rows are in flight
// while the last gate/up rows are computed and while the CTAs meet.
//
// Work. Grid: one CTA per SM (C CTAs, every one resident at once: the grid-wide barrier below
// needs that), 8 warps. CTA c owns the intermediate indices [c I / C, (c + 1) I / C) (n of them:
// its pairs of a gate row and an up row) and the output rows [c H / C, (c + 1) H / C) of the
// down projection. Pair u belongs to warp u % 8; output row r to warp (r + n) % 8, continuing
// the round robin. Each warp streams its stages in order, one cp.async commit group a stage of
// 256 P 16-byte vectors (H = 256 P, P = 4 or 8; lane l takes vectors l + 32 p): its gate and up
// rows, then its output rows' chunks of H columns (a down row has I / H of them).
//
// Order of work. Before `griddepcontrol.wait`: each warp's first D - 1 stages by cp.async into
// its own ring of D stages in shared memory, and the lane's norm weight vectors. After it: the
// lane's vectors of the residual row (each warp has the whole row, so its sum of squares is a
// warp reduction, no CTA-wide one), norm_weight * x rounded once (the wide GEMV's numerics: the
// sums are scaled by 1 / rms after the reduction). The pairs: a row's dot products (fp32), a
// warp reduction, and after the up row the SiLU-mul epilogue (rounded as the kSiluMul epilogue of
// the GEMVs), the activation stored to global memory in the dtype. Then a grid-wide barrier
// (thread 0 of each CTA counts its arrival; the last arrival resets the count and moves a
// generation word on, which the others wait for), all I activations from L2 into shared memory,
// and the output rows: a chunk's dot products with the activations, a warp reduction after a
// row's last chunk, residual = proj + residual rounded as the kAddResidual epilogue. The ring
// refills D - 1 stages ahead across the barrier.
//
// Scratch (`state`): the activations, the arrival count (zero between launches) and the
// generation. Launches on one stream run one after another (a layer's MLP waits for its
// attention and O projection, which wait for the previous layer's MLP), so one scratch serves
// every layer and every captured graph.
//
// PDL. The next kernel is let in once each warp has issued its last stage's load (trigger_left
// stages left, D - 1 by default), so its CTAs load their weights while this kernel's last stages
// land; all of this grid's CTAs have started by then, so none waits at the barrier for an SM.
//
// Numerics against the fused ops: the gate/up sums as the wide GEMV forms them, the down sums
// in another fp32 order (a lane's columns, then the warp), rounded at the same points; within the
// float32 reference's tolerance, not bit-equal. Deterministic: every sum has one order.

#include <algorithm>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common.h"
#include "decode_common.h"
#include "decode_gemv.cuh"
#include "decode_ops.h"

namespace vgraph {
namespace {

using gemv::add_squares8;
using gemv::mul8;
using gemv::round1;
using gemv::unpack8;
using gemv::warp_sum;
using gemv::weight_policy;

constexpr int kMlpWarps = 8;
constexpr int kMlpThreads = kMlpWarps * 32;
// The ring's stages a warp (VGRAPH_MLP_STAGES: 4-6, 6 by default). At 6, 5 stages of 4 KiB a
// warp are in flight, 160 KiB an SM; Llama-3.2-1B's batch-1 step took 787.2 us of GPU busy time
// against 797.9 at 5 (H200, 2026-12-05-h200-one-kernel-mlp, call 2).
constexpr int kMlpStages = 6;
constexpr int kMlpMinStages = 4, kMlpMaxStages = 6;

template <typename T>
struct MlpArgs {
  T* residual;               // [H]: the token's row
  const T* norm_weight;      // [H]
  float eps;
  const T* gate_up;          // [2 I, H]: gate rows, then up rows
  const T* down;             // [H, I]
  int H, I;
  T* act;                    // [I]: the activations (scratch)
  unsigned int* count;       // CTAs arrived at the barrier, zero between launches (scratch)
  unsigned int* gen;         // the barrier's generation, one more each launch (scratch)
  int trigger_left;          // stages left to a warp when it lets the next kernel in
  bool pdl;
  bool l2_evict_first;
};

// sum += w . x over 8 elements (fp32).
template <typename T>
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float sum) {
  float fw[8], fx[8];
  unpack8<T>(w, fw);
  unpack8<T>(x, fx);
#pragma unroll
  for (int e = 0; e < 8; ++e) sum = fmaf(fw[e], fx[e], sum);
  return sum;
}

__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
  unsigned int v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#else
  v = *reinterpret_cast<const volatile unsigned int*>(p);
#endif
  return v;
}

template <typename T, int P, int D>
__global__ void __launch_bounds__(kMlpThreads, 1) mlp_kernel(const MlpArgs<T> a) {
  constexpr int kH = 256 * P;  // the hidden size
  constexpr int kStageVecs = P * 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int C = gridDim.x;
  const int i_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * a.I / C);
  const int n = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * a.I / C) - i_begin;
  // This warp's pairs: u = warp + 8 j < n. Its output rows: r = r2 + 8 j < n_out, r2
  // continuing the round robin, I / H chunks each.
  const int n1 = warp < n ? (n - warp + kMlpWarps - 1) / kMlpWarps : 0;
  const int o_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * kH / C);
  const int n_out = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * kH / C) - o_begin;
  const int chunks = a.I / kH;
  const int r2 = ((warp - n) % kMlpWarps + kMlpWarps) % kMlpWarps;
  const int n2 = r2 < n_out ? (n_out - r2 + kMlpWarps - 1) / kMlpWarps * chunks : 0;
  const int rows = 2 * n1 + n2;  // stages

  extern __shared__ __align__(16) unsigned char smem[];
  uint4* s_ring = reinterpret_cast<uint4*>(smem);                // [warps][D][kStageVecs]
  T* s_x = reinterpret_cast<T*>(s_ring + kMlpWarps * D * kStageVecs);  // [kH]: the residual
  T* s_act = s_x + kH;                                           // [I]: every activation

  // Stage j of this warp's stream: a gate or up row of its pairs, then its down stages.
  auto stage_src = [&](int j) -> const uint4* {
    const T* p;
    if (j < 2 * n1) {
      const int64_t i = i_begin + warp + kMlpWarps * (j / 2);
      p = a.gate_up + (i + (j % 2) * static_cast<int64_t>(a.I)) * kH;
    } else {
      const int jj = j - 2 * n1;
      const int64_t row = o_begin + r2 + kMlpWarps * (jj / chunks);
      p = a.down + row * a.I + static_cast<int64_t>(jj % chunks) * kH;
    }
    return reinterpret_cast<const uint4*>(p) + lane;
  };
  uint4* ring = s_ring + warp * D * kStageVecs;
  const uint64_t policy = weight_policy(a.l2_evict_first);
  // One commit group a stage (empty past the warp's stages, so the group count stays uniform);
  // each lane copies and reads only its own slots ([stage][p][lane]), so its own cp.async wait
  // orders them.
  auto issue = [&](int j) {
    if (j < rows) {
      const uint4* src = stage_src(j);
      uint4* st = ring + (j % D) * kStageVecs;
#pragma unroll
      for (int p = 0; p < P; ++p) cp_async16_hint(st + p * 32 + lane, src + p * 32, policy);
    }
    cp_async_commit();
  };

  // 1. Before the wait: the first D - 1 stages and the norm weight.
#pragma unroll
  for (int s = 0; s < D - 1; ++s) issue(s);
  uint4 xw[P];
  const uint4* nw = reinterpret_cast<const uint4*>(a.norm_weight) + lane;
#pragma unroll
  for (int p = 0; p < P; ++p) xw[p] = nw[p * 32];
  pdl::wait();  // below: what earlier kernels wrote (the residual)

  // 2. The residual row, its 1 / rms, norm_weight * x.
  const uint4* xs = reinterpret_cast<const uint4*>(a.residual) + lane;
  float sq = 0.f;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const uint4 x = xs[p * 32];
    if (warp == 0) reinterpret_cast<uint4*>(s_x)[p * 32 + lane] = x;
    sq = add_squares8<T>(x, sq);
    xw[p] = mul8<T>(x, xw[p]);
  }
  const float inv_rms = rsqrtf(warp_sum(sq) / static_cast<float>(kH) + a.eps);

  // 3. The pairs: stage j waits for its slot (D - 1 groups were committed after it); the slot it
  // refills held stage j - 1, read in the previous iteration.
  const int trigger_j = a.pdl ? max(rows - a.trigger_left, 0) : -1;
  int j = 0;
  float gate = 0.f;
  for (; j < 2 * n1; ++j) {
    if (j == trigger_j) pdl::launch_dependents();
    issue(j + D - 1);
    cp_async_wait<D - 1>();
    compiler_fence();
    const uint4* st = ring + (j % D) * kStageVecs;
    float s = 0.f;
#pragma unroll
    for (int p = 0; p < P; ++p) s = dot8<T>(st[p * 32 + lane], xw[p], s);
    compiler_fence();
    s = warp_sum(s) * inv_rms;
    if (j % 2 == 0) {
      gate = s;
    } else if (lane == 0) {  // the kSiluMul epilogue's roundings
      const float g = round1<T>(gate), u = round1<T>(s);
      const float act = round1<T>(g / (1.f + expf(-g)));
      a.act[i_begin + warp + kMlpWarps * (j / 2)] = static_cast<T>(act * u);
    }
  }

  // 4. Every CTA's activations: a grid-wide barrier (arrivals counted, the last arrival resets
  // the count and moves the generation on; the others wait for it), then all I of them into
  // shared memory, from L2.
  __threadfence();  // this thread's activations are in before the CTA arrives
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int gen = load_acquire(a.gen);  // before arriving: it moves only after
    if (atomicAdd(a.count, 1u) == static_cast<unsigned int>(C - 1)) {
      atomicExch(a.count, 0u);
      __threadfence();
      atomicAdd(a.gen, 1u);
    } else {
      while (load_acquire(a.gen) == gen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
  const uint4* act = reinterpret_cast<const uint4*>(a.act);
  for (int v = threadIdx.x; v < a.I / 8; v += kMlpThreads) {
    reinterpret_cast<uint4*>(s_act)[v] = __ldcg(act + v);
  }
  __syncthreads();

  // 5. The down stages: chunk k of output row r, the lane's 8 P columns of it; a row's sum (a
  // warp reduction after its last chunk) plus its residual value, rounded as the kAddResidual
  // epilogue, is the row's result.
  float y = 0.f;
  for (; j < rows; ++j) {
    if (j == trigger_j) pdl::launch_dependents();
    issue(j + D - 1);
    cp_async_wait<D - 1>();
    compiler_fence();
    const int jj = j - 2 * n1, k = jj % chunks;
    const uint4* st = ring + (j % D) * kStageVecs;
    const uint4* x = reinterpret_cast<const uint4*>(s_act) + k * kStageVecs + lane;
#pragma unroll
    for (int p = 0; p < P; ++p) y = dot8<T>(st[p * 32 + lane], x[p * 32], y);
    compiler_fence();
    if (k == chunks - 1) {
      y = warp_sum(y);
      const int row = o_begin + r2 + kMlpWarps * (jj / chunks);
      if (lane == 0) {
        a.residual[row] = static_cast<T>(round1<T>(y) + static_cast<float>(s_x[row]));
      }
      y = 0.f;
    }
  }
  cp_async_wait<0>();  // the trailing (empty) groups
  if (trigger_j >= rows) pdl::launch_dependents();
}

template <typename T, int P, int D>
void launch_mlp(const MlpArgs<T>& a, int ctas, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(kMlpWarps) * D * P * 32 * 16 +
                      (256 * P + static_cast<size_t>(a.I)) * sizeof(T);
  TORCH_CHECK(smem <= 227 * 1024, "rms_norm_mlp_residual: ", smem,
              " bytes of shared memory a CTA; lower VGRAPH_MLP_STAGES");
  C10_CUDA_CHECK(cudaFuncSetAttribute(mlp_kernel<T, P, D>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      pdl::launch_config(dim3(ctas), dim3(kMlpThreads), smem, stream, attr, a.pdl);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, mlp_kernel<T, P, D>, a));
}

template <typename T, int P>
void launch_mlp_p(const MlpArgs<T>& a, int stages, int ctas, cudaStream_t stream) {
  if (stages == 4) return launch_mlp<T, P, 4>(a, ctas, stream);
  if (stages == 5) return launch_mlp<T, P, 5>(a, ctas, stream);
  launch_mlp<T, P, 6>(a, ctas, stream);
}

// Per gate/up shape [2 I, H]: the largest token count the one-kernel MLP takes (it has a one-token
// kernel only). Measured on an H200 in the decode step (benchmarks/bench_decode_step_ab.py);
// shapes not listed keep the two fused ops.
struct MlpEntry {
  int64_t h, i, max_tokens;
};
constexpr MlpEntry kMlpTable[] = {
    {2048, 8192, 1},  // Llama-3.2-1B
};

// The hidden sizes the kernel is instantiated for (H = 256 P); I must be a multiple of H (a down
// row is I / H stages).
bool mlp_hidden_ok(int64_t h) { return h == 1024 || h == 2048; }

// VGRAPH_FUSED_MLP_TOKENS=n (0 or 1) replaces the table's count for every shape the kernel takes
// (comparisons; the model reads it when it loads, the op at each call).
int64_t fused_mlp_tokens(int64_t h, int64_t i, int device) {
  if (!mlp_hidden_ok(h) || i < 1 || i % h != 0 || compute_major(device) < 8) return 0;
  int64_t table = 0;
  for (const MlpEntry& e : kMlpTable) {
    if (e.h == h && e.i == i) table = e.max_tokens;
  }
  return env_int("VGRAPH_FUSED_MLP_TOKENS", static_cast<int>(table), 0, 1);
}

template <typename T>
void launch_for(at::Tensor& residual, const at::Tensor& norm_weight, double eps,
                const at::Tensor& gate_up, const at::Tensor& down, const at::Tensor& state,
                int stages, int ctas, cudaStream_t stream) {
  MlpArgs<T> a = {};
  a.residual = static_cast<T*>(residual.data_ptr());
  a.norm_weight = static_cast<const T*>(norm_weight.data_ptr());
  a.eps = static_cast<float>(eps);
  a.gate_up = static_cast<const T*>(gate_up.data_ptr());
  a.down = static_cast<const T*>(down.data_ptr());
  a.H = static_cast<int>(residual.size(1));
  a.I = static_cast<int>(down.size(1));
  int64_t* words = state.data_ptr<int64_t>();
  const int64_t act_words = mlp_state_words(a.I) - 2;
  a.act = reinterpret_cast<T*>(words);
  a.count = reinterpret_cast<unsigned int*>(words + act_words);
  a.gen = reinterpret_cast<unsigned int*>(words + act_words + 1);
  a.pdl = pdl::enabled();
  a.trigger_left = env_int("VGRAPH_MLP_TRIGGER_LEFT", stages - 1, 0, 1 << 16);
  a.l2_evict_first = env_int("VGRAPH_GEMV_L2_EVICT_FIRST", 1, 0, 1) == 1;
  if (a.H == 2048) return launch_mlp_p<T, 8>(a, stages, ctas, stream);
  launch_mlp_p<T, 4>(a, stages, ctas, stream);
}

void rms_norm_mlp_residual_cuda(at::Tensor& residual, const at::Tensor& norm_weight, double eps,
                                const at::Tensor& gate_up, const at::Tensor& down,
                                const std::optional<at::Tensor>& state,
                                const std::optional<at::Tensor>& wide_packed,
                                std::optional<int64_t> max_fused_tokens) {
  check_rms_norm_mlp_residual(residual, norm_weight, gate_up, down, state);
  const int64_t m = residual.size(0), h = residual.size(1), inter = down.size(1);
  if (m == 0 || inter == 0) return;
  const c10::cuda::CUDAGuard guard(residual.device());
  const int device = residual.device().index();
  const int64_t limit = max_fused_tokens.value_or(fused_mlp_tokens(h, inter, device));
  const auto dt = residual.scalar_type();
  const bool one_kernel = state && m <= std::min<int64_t>(limit, 1) && mlp_hidden_ok(h) &&
                          inter % h == 0 && compute_major(device) >= 8 &&
                          (dt == at::kHalf || dt == at::kBFloat16) &&
                          aligned16(residual.data_ptr()) && aligned16(norm_weight.data_ptr()) &&
                          aligned16(gate_up.data_ptr()) && aligned16(down.data_ptr()) &&
                          inter < (1LL << 30);
  if (!one_kernel) return mlp_two_ops_cuda(residual, norm_weight, eps, gate_up, down, wide_packed);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Switches for comparisons, read at each call (a graph keeps what it was captured with):
  // VGRAPH_MLP_STAGES (the ring's stages a warp, 4-6), VGRAPH_MLP_TRIGGER_LEFT (stages left to a
  // warp when it lets the next kernel in; 0: after its stages), VGRAPH_MLP_CTAS (the grid: one CTA
  // an SM by default and at most, so that every CTA is resident at the barrier).
  const int stages = env_int("VGRAPH_MLP_STAGES", kMlpStages, kMlpMinStages, kMlpMaxStages);
  const int sms = num_sms(device);
  const int ctas = env_int("VGRAPH_MLP_CTAS", sms, 1, sms);
  AT_DISPATCH_SWITCH(dt, "rms_norm_mlp_residual_cuda", AT_DISPATCH_CASE(at::kHalf, [&] {
    launch_for<scalar_t>(residual, norm_weight, eps, gate_up, down, *state, stages, ctas, stream);
  }) AT_DISPATCH_CASE(at::kBFloat16, [&] {
    launch_for<scalar_t>(residual, norm_weight, eps, gate_up, down, *state, stages, ctas, stream);
  }));
}

int64_t fused_mlp_tokens_cuda(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(0) % 2 == 0,
              "gate_up_weight must be [2 * I, H], got ", gate_up.sizes());
  return fused_mlp_tokens(gate_up.size(1), gate_up.size(0) / 2, gate_up.device().index());
}

}  // namespace
}  // namespace vgraph

TORCH_LIBRARY_IMPL(vgraph_C, CUDA, m) {
  m.impl("rms_norm_mlp_residual", &vgraph::rms_norm_mlp_residual_cuda);
  m.impl("fused_mlp_tokens", &vgraph::fused_mlp_tokens_cuda);
}

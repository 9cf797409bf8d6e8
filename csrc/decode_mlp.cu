// rms_norm_mlp_residual on CUDA: a decoder layer's whole MLP at one token in one kernel,
// residual += down(silu_and_mul(gate_up(rms_norm(residual)))), where the fused ops take two
// (rms_norm_gate_up_silu, then linear_add_residual for the down projection).
//
// Why one kernel. At one token Llama-3.2-1B's gate/up (67 MB) and down (34 MB) projections stream
// their 100 MB at about 80% of the bandwidth the LM head reaches: the down projection cannot
// start its products before the last gate/up CTA has written its activations, so each of the two
// kernels pays its own ramp-up and tail, and the hand-over between them (the PDL wait, the
// activations' round trip, the rest of the down weights streamed after the wait) sits on the
// step's path, 16 times a step. Here no CTA ever waits for another CTA's activations: CTA c owns
// a slice of the intermediate dimension, [c I / C, (c + 1) I / C), computes its activations from
// its gate and up rows, and at once multiplies them by the same columns of the down projection,
// read as rows of down_t = W_down^T (a copy made at load: each column of W_down is then a
// contiguous row, 4 KiB at H = 2,048). Its partial of the down projection, all H outputs, is
// added to a shared accumulator; the last CTA to finish adds the accumulator to the residual.
// Every byte of weight streams in one pass per CTA, gate row, up row, ..., then down rows, with no
// kernel boundary between them.
//
// Work. Grid: one CTA per SM (C CTAs), 8 warps. A CTA's units are its n intermediate indices
// twice over: unit u < n is the pair (gate row, up row) of index u, unit n + u the down_t row of
// index u; unit u belongs to warp u % 8, so each warp streams the rows of its units in order: its
// pairs, then its down rows. Every row is 256 P 16-byte vectors (H = 256 P: P = 4 or 8) and lane
// l reads vectors l + 32 p of it.
//
// Order of work. Before `griddepcontrol.wait`: each warp's first D - 1 rows by cp.async into its
// own ring of D stages in shared memory (one row a stage), and the lane's norm weight vectors.
// After it: the lane's vectors of the residual row (each warp has the whole row: its sum of
// squares is a warp reduction, no CTA-wide one), the products norm_weight * x rounded once (the
// wide GEMV's numerics: the sums are scaled by 1 / rms after the reduction). The warps then run
// their pairs: a row's dot products (fp32), a warp reduction, and for an up row the SiLU-mul
// epilogue (rounded as the kSiluMul epilogue of the GEMVs), the activation into shared memory. A
// barrier (every activation of the CTA is in), then the down rows: each lane adds act * row into
// 8 P fp32 accumulators, its own columns, so no reduction between the lanes. The ring refills
// D - 1 rows ahead across the barrier, so the down rows are in flight while the last pairs run.
//
// The cross-CTA sum. The 8 warps' partials meet in shared memory (over the ring, in warp order);
// each of the CTA's H sums becomes a 64-bit fixed-point integer (value * 2^32, rounded to nearest)
// added with an integer atomic into the accumulator. Integer addition is associative, so the
// result does not depend on the order the CTAs finish in: the kernel is deterministic, as the
// unfused path is (float atomics would not be). Values of the down projection must stay within
// +-2^31 (far beyond what a bf16 model's activations reach). After its atomics and a fence, a
// CTA counts itself done on the ticket; the CTA that counts last takes each accumulated sum and
// zeroes it in one exchange, rounds it to the dtype (the projection's rounding, as the kAddResidual
// epilogue) and writes residual = proj + residual, then zeroes the ticket. So the scratch
// (`state`: H accumulators, then the ticket) is zero between launches; launches on one stream
// run one after another (a layer's MLP waits for the layer's attention and O projection), so one
// scratch serves every layer and every captured graph.
//
// PDL. The next kernel is let in once each warp has issued its last row's load (trigger_left rows
// left, D - 1 by default), so its CTAs load their weights while this kernel's last rows land.
//
// Numerics against the fused ops: the gate/up sums as the wide GEMV forms them (another fp32
// order), the down projection's sum in another order (warps, then CTAs in fixed point) but
// rounded at the same points. Within the float32 reference's tolerance; not bit-equal.
#include <algorithm>
#include <cstdlib>
#include <cstring>
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
constexpr int kMlpStages = 5;                       // the default ring depth (rows a warp)
constexpr int kMlpMinStages = 4, kMlpMaxStages = 6;  // VGRAPH_MLP_STAGES' range
constexpr float kFixedScale = 4294967296.f;          // 2^32: the accumulator's fixed point

template <typename T>
struct MlpArgs {
  T* residual;               // [H]: the token's row
  const T* norm_weight;      // [H]
  float eps;
  const T* gate_up;          // [2 I, H]: gate rows, then up rows
  const T* down;             // [H, I]: the down projection's weight (kBarrier)
  const T* down_t;           // [I, H]: the same transposed (the atomic sums)
  int H, I;
  // Scratch (MlpState), zero between launches but for `gen`.
  unsigned long long* acc;   // [H] fixed-point sums (the atomic sums)
  T* act;                    // [I] the activations (kBarrier)
  unsigned int* count;       // CTAs done (the atomic sums) or arrived (kBarrier)
  unsigned int* gen;         // kBarrier: the barrier's generation, one more each launch
  int trigger_left;          // rows left to a warp when it lets the next kernel in
  int probe;                 // measurements only, results wrong: 1 skips the cross-CTA step
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

// kBarrier: the down projection row-major, each CTA its own output rows over all I activations,
// after a grid-wide barrier (every CTA resident: the launcher's grid is at most one CTA an SM);
// else over down_t, each CTA's partial of every output summed in fixed point by atomics.
template <typename T, int P, int D, bool kBarrier>
__global__ void __launch_bounds__(kMlpThreads, 1) mlp_kernel(const MlpArgs<T> a) {
  constexpr int kH = 256 * P;  // the hidden size
  constexpr int kStageVecs = P * 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int C = gridDim.x;
  const int i_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * a.I / C);
  const int n = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * a.I / C) - i_begin;
  // This warp's pairs: u = warp + 8 j < n.
  const int n1 = warp < n ? (n - warp + kMlpWarps - 1) / kMlpWarps : 0;
  // Its down stages. Atomic sums: the down_t rows of units u = u2 + 8 j < 2 n (the round robin
  // continued). kBarrier: the chunks (kH columns each) of output rows r = r2 + 8 j of the CTA's
  // [o_begin, o_begin + n_out), r2 continuing the pairs' round robin likewise.
  const int o_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * kH / C);
  const int n_out = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * kH / C) - o_begin;
  const int chunks = a.I / kH;  // kBarrier: a down row's chunks
  const int u2 = n + ((warp - n) % kMlpWarps + kMlpWarps) % kMlpWarps;
  const int r2 = ((warp - n) % kMlpWarps + kMlpWarps) % kMlpWarps;
  const int n2 = kBarrier ? (r2 < n_out ? (n_out - r2 + kMlpWarps - 1) / kMlpWarps * chunks : 0)
                          : (u2 < 2 * n ? (2 * n - u2 + kMlpWarps - 1) / kMlpWarps : 0);
  const int rows = 2 * n1 + n2;

  extern __shared__ __align__(16) unsigned char smem[];
  uint4* s_ring = reinterpret_cast<uint4*>(smem);                // [warps][D][kStageVecs]
  float* s_part = reinterpret_cast<float*>(smem);                // [warps][kH], after the rows
  T* s_x = reinterpret_cast<T*>(s_ring + kMlpWarps * D * kStageVecs);  // [kH]: the residual
  float* s_act = reinterpret_cast<float*>(s_x + kH);             // [n]: the CTA's activations
  T* s_act_all = reinterpret_cast<T*>(s_act + ((n + 3) & ~3));   // kBarrier: [I], all of them
  __shared__ bool s_last;

  // Stage j of this warp's stream: a gate or up row of its pairs, then its down stages.
  auto stage_src = [&](int j) -> const uint4* {
    const T* p;
    if (j < 2 * n1) {
      const int64_t i = i_begin + warp + kMlpWarps * (j / 2);
      p = a.gate_up + (i + (j % 2) * static_cast<int64_t>(a.I)) * kH;
    } else if constexpr (kBarrier) {
      const int jj = j - 2 * n1;
      const int64_t row = o_begin + r2 + kMlpWarps * (jj / chunks);
      p = a.down + row * a.I + static_cast<int64_t>(jj % chunks) * kH;
    } else {
      const int64_t i = i_begin + u2 - n + kMlpWarps * (j - 2 * n1);
      p = a.down_t + i * kH;
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
      const int i = warp + kMlpWarps * (j / 2);
      if constexpr (kBarrier) {
        a.act[i_begin + i] = static_cast<T>(act * u);
      } else {
        s_act[i] = round1<T>(act * u);
      }
    }
  }

  if constexpr (kBarrier) {
    // 4. Every CTA's activations: a grid-wide barrier (arrivals counted, the last arrival resets
    // the count and moves the generation on; the others wait for it), then all I of them into
    // shared memory, from L2.
    __threadfence();  // this thread's activations are in before the CTA arrives
    __syncthreads();
    if (threadIdx.x == 0 && a.probe != 1) {
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
      reinterpret_cast<uint4*>(s_act_all)[v] = __ldcg(act + v);
    }
    __syncthreads();

    // 5. The down stages: chunk k of output row r, the lane's 8 P columns of it; a row's sum
    // (a warp reduction after its last chunk) plus its residual value, rounded as the
    // kAddResidual epilogue, is the row's result.
    float y = 0.f;
    for (; j < rows; ++j) {
      if (j == trigger_j) pdl::launch_dependents();
      issue(j + D - 1);
      cp_async_wait<D - 1>();
      compiler_fence();
      const int jj = j - 2 * n1, k = jj % chunks;
      const uint4* st = ring + (j % D) * kStageVecs;
      const uint4* x = reinterpret_cast<const uint4*>(s_act_all) + k * kStageVecs + lane;
#pragma unroll
      for (int p = 0; p < P; ++p) y = dot8<T>(st[p * 32 + lane], x[p * 32], y);
      compiler_fence();
      if (k == chunks - 1) {
        y = warp_sum(y);
        const int row = o_begin + r2 + kMlpWarps * (jj / chunks);
        if (lane == 0) a.residual[row] = static_cast<T>(round1<T>(y) + static_cast<float>(s_x[row]));
        y = 0.f;
      }
    }
    cp_async_wait<0>();  // the trailing (empty) groups
    if (trigger_j >= rows) pdl::launch_dependents();
    return;
  }

  __syncthreads();  // every activation of the CTA

  // 4. The down rows: acc[8 p + e] is column 8 (lane + 32 p) + e.
  float acc[8 * P];
#pragma unroll
  for (int e = 0; e < 8 * P; ++e) acc[e] = 0.f;
  for (; j < rows; ++j) {
    if (j == trigger_j) pdl::launch_dependents();
    issue(j + D - 1);
    cp_async_wait<D - 1>();
    compiler_fence();
    const uint4* st = ring + (j % D) * kStageVecs;
    const float v = s_act[u2 - n + kMlpWarps * (j - 2 * n1)];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      float f[8];
      unpack8<T>(st[p * 32 + lane], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[8 * p + e] = fmaf(v, f[e], acc[8 * p + e]);
    }
    compiler_fence();
  }
  cp_async_wait<0>();  // the trailing (empty) groups
  if (trigger_j >= rows) pdl::launch_dependents();
  __syncthreads();  // every warp is done with its ring: the partials go over it

  // 5. The warps' partials, summed in warp order; the CTA's sums into the accumulator.
  float4* part = reinterpret_cast<float4*>(s_part + warp * kH);
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int v = lane + 32 * p;
    part[2 * v] = make_float4(acc[8 * p], acc[8 * p + 1], acc[8 * p + 2], acc[8 * p + 3]);
    part[2 * v + 1] = make_float4(acc[8 * p + 4], acc[8 * p + 5], acc[8 * p + 6], acc[8 * p + 7]);
  }
  __syncthreads();
  if (a.probe == 1) return;
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int col = k * kMlpThreads + threadIdx.x;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kMlpWarps; ++w) sum += s_part[w * kH + col];
    const long long q = __float2ll_rn(sum * kFixedScale);
    atomicAdd(a.acc + col, static_cast<unsigned long long>(q));
  }
  __threadfence();  // this thread's sums are in before the CTA counts itself done
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(a.count, 1u) == static_cast<unsigned int>(C - 1);
  __syncthreads();
  if (!s_last) return;

  // 6. The last CTA: every other CTA's sums are in (they fenced before counting).
  __threadfence();
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int col = k * kMlpThreads + threadIdx.x;
    const long long total = static_cast<long long>(atomicExch(a.acc + col, 0ull));
    const float y = static_cast<float>(static_cast<double>(total) * (1.0 / kFixedScale));
    a.residual[col] = static_cast<T>(round1<T>(y) + static_cast<float>(s_x[col]));
  }
  if (threadIdx.x == 0) atomicExch(a.count, 0u);
}

template <typename T, int P, int D, bool kBarrier>
void launch_mlp(const MlpArgs<T>& a, int ctas, cudaStream_t stream) {
  const int max_n = (a.I + ctas - 1) / ctas;
  const size_t smem = static_cast<size_t>(kMlpWarps) * D * P * 32 * 16 + 256 * P * sizeof(T) +
                      static_cast<size_t>((max_n + 3) & ~3) * sizeof(float) +
                      (kBarrier ? static_cast<size_t>(a.I) * sizeof(T) : 0);
  TORCH_CHECK(smem <= 227 * 1024, "rms_norm_mlp_residual: ", smem,
              " bytes of shared memory a CTA; lower VGRAPH_MLP_STAGES");
  C10_CUDA_CHECK(cudaFuncSetAttribute(mlp_kernel<T, P, D, kBarrier>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      pdl::launch_config(dim3(ctas), dim3(kMlpThreads), smem, stream, attr, a.pdl);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, mlp_kernel<T, P, D, kBarrier>, a));
}

template <typename T, int P, bool kBarrier>
void launch_mlp_p(const MlpArgs<T>& a, int stages, int ctas, cudaStream_t stream) {
  if (stages == 4) return launch_mlp<T, P, 4, kBarrier>(a, ctas, stream);
  if (stages == 6) return launch_mlp<T, P, 6, kBarrier>(a, ctas, stream);
  launch_mlp<T, P, kMlpStages, kBarrier>(a, ctas, stream);
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

// The hidden sizes the kernel is instantiated for (H = 256 P).
bool mlp_hidden_ok(int64_t h) { return h == 1024 || h == 2048; }

// VGRAPH_FUSED_MLP_TOKENS=n (0 or 1) replaces the table's count for every shape the kernel takes
// (comparisons; the model reads it when it loads, the op at each call).
int64_t fused_mlp_tokens(int64_t h, int64_t i, int device) {
  if (!mlp_hidden_ok(h) || i < 1 || compute_major(device) < 8) return 0;
  int64_t table = 0;
  for (const MlpEntry& e : kMlpTable) {
    if (e.h == h && e.i == i) table = e.max_tokens;
  }
  return env_int("VGRAPH_FUSED_MLP_TOKENS", static_cast<int>(table), 0, 1);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The cross-CTA step (VGRAPH_MLP_SUM, read at each call, for comparisons): "barrier" (the down
// projection row-major after a grid-wide barrier) or "atomic" (over down_t, fixed-point atomic
// sums; needs down_t).
bool mlp_barrier(bool has_down_t) {
  const char* v = std::getenv("VGRAPH_MLP_SUM");
  if (v == nullptr || v[0] == '\0') return true;
  TORCH_CHECK(std::strcmp(v, "barrier") == 0 || std::strcmp(v, "atomic") == 0,
              "VGRAPH_MLP_SUM must be barrier or atomic, got ", v);
  TORCH_CHECK(std::strcmp(v, "barrier") == 0 || has_down_t,
              "VGRAPH_MLP_SUM=atomic needs down_t");
  return std::strcmp(v, "barrier") == 0;
}

template <typename T>
void launch_for(at::Tensor& residual, const at::Tensor& norm_weight, double eps,
                const at::Tensor& gate_up, const at::Tensor& down,
                const std::optional<at::Tensor>& down_t, const at::Tensor& state, bool barrier,
                int stages, int ctas, cudaStream_t stream) {
  MlpArgs<T> a = {};
  a.residual = static_cast<T*>(residual.data_ptr());
  a.norm_weight = static_cast<const T*>(norm_weight.data_ptr());
  a.eps = static_cast<float>(eps);
  a.gate_up = static_cast<const T*>(gate_up.data_ptr());
  a.down = static_cast<const T*>(down.data_ptr());
  a.down_t = down_t ? static_cast<const T*>(down_t->data_ptr()) : nullptr;
  a.H = static_cast<int>(residual.size(1));
  a.I = static_cast<int>(down.size(1));
  // state: [0, H) the sums, [H, H + I) the activations (I of T fit), then the count, the gen.
  int64_t* words = state.data_ptr<int64_t>();
  a.acc = reinterpret_cast<unsigned long long*>(words);
  a.act = reinterpret_cast<T*>(words + a.H);
  a.count = reinterpret_cast<unsigned int*>(words + a.H + a.I);
  a.gen = reinterpret_cast<unsigned int*>(words + a.H + a.I + 1);
  a.pdl = pdl::enabled();
  a.trigger_left = env_int("VGRAPH_MLP_TRIGGER_LEFT", stages - 1, 0, 1 << 16);
  a.probe = env_int("VGRAPH_MLP_PROBE", 0, 0, 1);
  a.l2_evict_first = env_int("VGRAPH_GEMV_L2_EVICT_FIRST", 1, 0, 1) == 1;
  if (a.H == 2048) {
    if (barrier) return launch_mlp_p<T, 8, true>(a, stages, ctas, stream);
    return launch_mlp_p<T, 8, false>(a, stages, ctas, stream);
  }
  if (barrier) return launch_mlp_p<T, 4, true>(a, stages, ctas, stream);
  launch_mlp_p<T, 4, false>(a, stages, ctas, stream);
}

void rms_norm_mlp_residual_cuda(at::Tensor& residual, const at::Tensor& norm_weight, double eps,
                                const at::Tensor& gate_up, const at::Tensor& down,
                                const std::optional<at::Tensor>& down_t,
                                const std::optional<at::Tensor>& state,
                                const std::optional<at::Tensor>& wide_packed,
                                std::optional<int64_t> max_fused_tokens) {
  check_rms_norm_mlp_residual(residual, norm_weight, gate_up, down, down_t, state);
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
                          (!down_t || aligned16(down_t->data_ptr())) && inter < (1LL << 30);
  if (!one_kernel) return mlp_two_ops_cuda(residual, norm_weight, eps, gate_up, down, wide_packed);
  const bool barrier = mlp_barrier(down_t.has_value());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Switches for comparisons, read at each call (a graph keeps what it was captured with):
  // VGRAPH_MLP_STAGES (the ring's stages a warp, 4-6), VGRAPH_MLP_TRIGGER_LEFT (stages left to a
  // warp when it lets the next kernel in; 0: after its stages), VGRAPH_MLP_CTAS (the grid;
  // default and at most with the barrier one CTA an SM), VGRAPH_MLP_PROBE=1 (no cross-CTA step:
  // results wrong, for measurements only).
  const int stages = env_int("VGRAPH_MLP_STAGES", kMlpStages, kMlpMinStages, kMlpMaxStages);
  const int sms = num_sms(device);
  const int ctas = env_int("VGRAPH_MLP_CTAS", sms, 1, barrier ? sms : 1 << 16);
  AT_DISPATCH_SWITCH(dt, "rms_norm_mlp_residual_cuda", AT_DISPATCH_CASE(at::kHalf, [&] {
    launch_for<scalar_t>(residual, norm_weight, eps, gate_up, down, down_t, *state, barrier,
                         stages, ctas, stream);
  }) AT_DISPATCH_CASE(at::kBFloat16, [&] {
    launch_for<scalar_t>(residual, norm_weight, eps, gate_up, down, down_t, *state, barrier,
                         stages, ctas, stream);
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

// What a kernel boundary costs inside a CUDA graph on the H200, and whether an arrival counter
// (release / acquire through global memory) hands a dependent kernel its input sooner than
// `griddepcontrol.wait` (which waits for the whole previous grid to complete and flush).
//
// A chain of NK dependent GEMV-like kernels (each reads the vector the previous one wrote, streams
// its own [R, D] float32 weights, writes R outputs), captured in one graph and replayed:
//   plain    no launch attribute: each kernel starts when the previous one has completed
//   pdl      programmatic stream serialization; weights loaded before griddepcontrol.wait
//   arrive   the same launch; instead of the wait, thread 0 spins on the previous kernel's arrival
//            counter (ld.acquire.gpu) until every CTA of it arrived; each CTA arrives after its
//            stores (bar.sync, then thread 0: fence + atomicAdd). A memset node zeroes the counters
//            at the graph's start.
//   arrive_late  as arrive, but launch_dependents after the arrival instead of at the start
// All variants compute the same thing in the same order: their outputs must be bit-equal.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 chain_probe.cu -o chain_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

enum Mode { kPlain = 0, kPdl = 1, kArrive = 2, kArriveLate = 3 };
const char* kNames[] = {"plain", "pdl", "arrive", "arrive_late"};
constexpr int kWarps = 4;  // one output row per warp

__device__ __forceinline__ void gdc_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void gdc_launch() { asm volatile("griddepcontrol.launch_dependents;" :::); }
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ float4 ld_stream(const float4* p) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}

template <int D, int MODE>
__global__ void __launch_bounds__(kWarps * 32) link(const float* __restrict__ w, const float* in,
                                                     float* out, unsigned* counters, int i) {
  constexpr int kVec = D / 128;  // float4 per lane
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + warp;
  if (MODE != kArriveLate) gdc_launch();
  float4 wr[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k)
    wr[k] = ld_stream(reinterpret_cast<const float4*>(w + (size_t)row * D) + k * 32 + lane);
  if (MODE == kPdl) {
    gdc_wait();
  } else if (MODE >= kArrive && i > 0) {
    if (threadIdx.x == 0) {
      while (ld_acquire(&counters[i - 1]) < gridDim.x) {
      }
    }
    __syncthreads();
  }
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float4 x = __ldcg(reinterpret_cast<const float4*>(in) + k * 32 + lane);
    acc += wr[k].x * x.x + wr[k].y * x.y + wr[k].z * x.z + wr[k].w * x.w;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) out[row] = tanhf(acc);
  if (MODE >= kArrive) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(&counters[i], 1u);
    }
  }
  if (MODE == kArriveLate) gdc_launch();
}

struct Chain {
  int nk, d, rows;
  float *w, *buf, *x0;
  unsigned* counters;
  cudaGraphExec_t exec[4];
};

template <int D, int MODE>
void launch_link(const Chain& c, int i, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3(c.rows / kWarps);
  cfg.blockDim = dim3(kWarps * 32);
  cfg.stream = s;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = (MODE != kPlain && i > 0) ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const float* in = i == 0 ? c.x0 : c.buf + (size_t)((i - 1) % 2) * c.rows;
  float* out = c.buf + (size_t)(i % 2) * c.rows;
  CK(cudaLaunchKernelEx(&cfg, link<D, MODE>, (const float*)(c.w + (size_t)i * c.rows * D), in,
                        out, c.counters, i));
}

template <int D>
void capture(Chain& c, int mode, cudaStream_t s) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMemsetAsync(c.counters, 0, sizeof(unsigned) * c.nk, s));
  for (int i = 0; i < c.nk; ++i) {
    switch (mode) {
      case kPlain: launch_link<D, kPlain>(c, i, s); break;
      case kPdl: launch_link<D, kPdl>(c, i, s); break;
      case kArrive: launch_link<D, kArrive>(c, i, s); break;
      default: launch_link<D, kArriveLate>(c, i, s); break;
    }
  }
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&c.exec[mode], g, 0));
  CK(cudaGraphDestroy(g));
}

template <int D>
void run(int rows, int nk, int reps, FILE* js, bool& first) {
  Chain c{nk, D, rows};
  const size_t nw = (size_t)nk * rows * D;
  CK(cudaMalloc(&c.w, nw * sizeof(float)));
  CK(cudaMalloc(&c.buf, 2 * rows * sizeof(float)));
  CK(cudaMalloc(&c.x0, D * sizeof(float)));
  CK(cudaMalloc(&c.counters, nk * sizeof(unsigned)));
  std::vector<float> h(nw);
  unsigned seed = 12345;
  const float scale = 2.0f / std::sqrt((float)D);
  for (auto& v : h) {
    seed = seed * 1664525u + 1013904223u;
    v = ((seed >> 8) * (1.0f / 16777216.0f) - 0.5f) * scale * 2.f;
  }
  CK(cudaMemcpy(c.w, h.data(), nw * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float> x0(D);
  for (int j = 0; j < D; ++j) x0[j] = std::sin(0.37f * j + 0.1f);
  CK(cudaMemcpy(c.x0, x0.data(), D * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int m = 0; m < 4; ++m) capture<D>(c, m, s);
  // correctness: every mode's final vector bit-equal to plain's
  std::vector<float> ref(rows), got(rows);
  const float* last = c.buf + (size_t)((nk - 1) % 2) * rows;
  bool equal[4] = {true, true, true, true};
  for (int m = 0; m < 4; ++m) {
    for (int r = 0; r < 3; ++r) {
      CK(cudaMemset(c.buf, 0, 2 * rows * sizeof(float)));
      CK(cudaGraphLaunch(c.exec[m], s));
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(m == 0 && r == 0 ? ref.data() : got.data(), last, rows * sizeof(float),
                    cudaMemcpyDeviceToHost));
      if (!(m == 0 && r == 0)) equal[m] = equal[m] && std::memcmp(ref.data(), got.data(), rows * 4) == 0;
    }
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t[4];
  for (int r = 0; r < 20; ++r)
    for (int m = 0; m < 4; ++m) CK(cudaGraphLaunch(c.exec[m], s));
  for (int r = 0; r < reps; ++r) {
    for (int m = 0; m < 4; ++m) {
      CK(cudaEventRecord(e0, s));
      CK(cudaGraphLaunch(c.exec[m], s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t[m].push_back(ms * 1000.f);
    }
  }
  const double mb = (double)rows * D * 4 / 1e6;
  for (int m = 0; m < 4; ++m) {
    std::sort(t[m].begin(), t[m].end());
    const float med = t[m][t[m].size() / 2];
    std::printf("D=%5d rows=%5d (%.2f MB a kernel) %-12s %8.1f us for %d kernels, %6.3f us a kernel, bit-equal %s\n",
                D, rows, mb, kNames[m], med, nk, med / nk, equal[m] ? "yes" : "NO");
    std::fprintf(js, "%s{\"d\": %d, \"rows\": %d, \"mode\": \"%s\", \"median_us\": %.2f, \"kernels\": %d, \"us_per_kernel\": %.4f, \"p10_us\": %.2f, \"p90_us\": %.2f, \"bit_equal\": %s}",
                 first ? "" : ",\n", D, rows, kNames[m], med, nk, med / nk, t[m][t[m].size() / 10],
                 t[m][t[m].size() * 9 / 10], equal[m] ? "true" : "false");
    first = false;
  }
  for (int m = 0; m < 4; ++m) CK(cudaGraphExecDestroy(c.exec[m]));
  CK(cudaFree(c.w));
  CK(cudaFree(c.buf));
  CK(cudaFree(c.x0));
  CK(cudaFree(c.counters));
  CK(cudaStreamDestroy(s));
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "chain_probe.json";
  FILE* js = std::fopen(path, "w");
  std::fprintf(js, "[\n");
  bool first = true;
  run<512>(512, 150, 300, js, first);    // 128 CTAs, 1 MB a kernel (SmolLM2-like boundaries)
  run<512>(128, 150, 300, js, first);    // 32 CTAs
  run<1024>(2048, 100, 200, js, first);  // 512 CTAs, 8 MB a kernel
  run<2048>(2048, 64, 200, js, first);   // 512 CTAs, 16 MB a kernel (Llama-like)
  std::fprintf(js, "\n]\n");
  std::fclose(js);
  return 0;
}

// How a kernel boundary's cost in a CUDA graph depends on the number of CTAs: chains of dependent
// GEMV-like kernels (each reads the vector the previous one wrote, streams its own 1 MB of float32
// weights held in registers, writes its rows), launched with programmatic stream serialization
// (weights loaded before griddepcontrol.wait), all moving the same bytes a kernel but spread over
// 16 to 256 CTAs of 4 warps (8 to 1 rows a warp). Outputs of every shape checked against a host
// reference. Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 cta_probe.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

constexpr int kWarps = 4;
constexpr int kTotal = 1 << 18;  // floats of weights a kernel: 1 MB

__device__ __forceinline__ float4 ld_stream(const float4* p) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}

// D: row length; R: rows a warp. Rows of CTA b, warp w: (b * kWarps + w) * R + r.
template <int D, int R>
__global__ void __launch_bounds__(kWarps * 32) link(const float* __restrict__ w, const float* in,
                                                     float* out) {
  constexpr int kVec = D / 128;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * kWarps + warp) * R;
  asm volatile("griddepcontrol.launch_dependents;" :::);
  float4 wr[R][kVec];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      wr[r][k] = ld_stream(reinterpret_cast<const float4*>(w + (size_t)(row0 + r) * D) + k * 32 + lane);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float4 x = reinterpret_cast<const float4*>(in)[(k * 32 + lane) % (D / 4)];
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc[r] += wr[r][k].x * x.x + wr[r][k].y * x.y + wr[r][k].z * x.z + wr[r][k].w * x.w;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s = acc[r];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == r) out[row0 + r] = tanhf(s);
  }
}

template <int D, int R>
void run(int nk, int reps, FILE* js, bool& first) {
  const int rows = kTotal / D, ctas = rows / (kWarps * R);
  // the input of kernel i is the previous output's first D entries (rows >= D here)
  float *w, *buf, *x0;
  CK(cudaMalloc(&w, (size_t)nk * kTotal * 4));
  CK(cudaMalloc(&buf, 2 * rows * 4));
  CK(cudaMalloc(&x0, rows * 4));
  std::vector<float> hw((size_t)nk * kTotal);
  unsigned seed = 7;
  for (auto& v : hw) {
    seed = seed * 1664525u + 1013904223u;
    v = ((seed >> 8) * (1.0f / 16777216.0f) - 0.5f) * 4.f / std::sqrt((float)D);
  }
  std::vector<float> hx(rows);
  for (int j = 0; j < rows; ++j) hx[j] = std::sin(0.37f * j + 0.1f);
  CK(cudaMemcpy(w, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(x0, hx.data(), rows * 4, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < nk; ++i) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3(ctas);
    cfg.blockDim = dim3(kWarps * 32);
    cfg.stream = s;
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = i > 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const float* in = i == 0 ? x0 : buf + (size_t)((i - 1) % 2) * rows;
    CK(cudaLaunchKernelEx(&cfg, link<D, R>, (const float*)(w + (size_t)i * kTotal), in,
                          buf + (size_t)(i % 2) * rows));
  }
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  // host reference of the chain
  std::vector<float> cur(hx), nxt(rows);
  for (int i = 0; i < nk; ++i) {
    for (int r = 0; r < rows; ++r) {
      double acc = 0;
      for (int j = 0; j < D; ++j) acc += (double)hw[(size_t)i * kTotal + (size_t)r * D + j] * cur[j];
      nxt[r] = std::tanh((float)acc);
    }
    cur.swap(nxt);
  }
  std::vector<float> got(rows);
  CK(cudaMemcpy(got.data(), buf + (size_t)((nk - 1) % 2) * rows, rows * 4, cudaMemcpyDeviceToHost));
  double err = 0;
  for (int r = 0; r < rows; ++r) err = std::max(err, (double)std::fabs(got[r] - cur[r]));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int r = 0; r < 20; ++r) CK(cudaGraphLaunch(exec, s));
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1000.f);
  }
  std::sort(t.begin(), t.end());
  const float med = t[t.size() / 2];
  std::printf("%4d CTAs x %d warps, %d rows a warp, D=%4d: %7.1f us for %d kernels, %6.3f us a kernel, max err %.1e\n",
              ctas, kWarps, R, D, med, nk, med / nk, err);
  std::fprintf(js, "%s{\"ctas\": %d, \"rows_per_warp\": %d, \"d\": %d, \"median_us\": %.2f, \"kernels\": %d, \"us_per_kernel\": %.4f, \"max_err\": %.3e}",
               first ? "" : ",\n", ctas, R, D, med, nk, med / nk, err);
  first = false;
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
  CK(cudaFree(w));
  CK(cudaFree(buf));
  CK(cudaFree(x0));
  CK(cudaStreamDestroy(s));
}

int main(int argc, char** argv) {
  FILE* js = std::fopen(argc > 1 ? argv[1] : "cta_probe.json", "w");
  std::fprintf(js, "[\n");
  bool first = true;
  for (int pass = 0; pass < 2; ++pass) {  // twice: the spread between passes
    run<256, 1>(150, 200, js, first);   // 256 CTAs
    run<512, 1>(150, 200, js, first);   // 128
    run<512, 2>(150, 200, js, first);   // 64
    run<512, 4>(150, 200, js, first);   // 32
    run<512, 8>(150, 200, js, first);   // 16
    run<1024, 4>(150, 200, js, first);  // 16, longer rows
  }
  std::fprintf(js, "\n]\n");
  std::fclose(js);
  return 0;
}

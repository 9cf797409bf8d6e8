// Probe of L2 prefetch on the H200: how long issuing bulk (cp.async.bulk.prefetch.L2) and
// per-line (prefetch.global.L2) prefetches keeps a kernel alive, by issuing CTAs, chunk size and
// bytes; and whether a streaming read of prefetched bytes is faster than one from HBM.
// nvcc -O3 -arch=sm_90 l2_probe.cu -o l2_probe && ./l2_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__global__ void bulk_prefetch(const char* base, long long total, int chunk, int issuers) {
  if (threadIdx.x >= issuers) return;
  const long long workers = static_cast<long long>(gridDim.x) * issuers;
  const long long n = total / chunk;
  for (long long c = blockIdx.x * issuers + threadIdx.x; c < n; c += workers)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + c * chunk), "r"(chunk)
                 : "memory");
}

__global__ void line_prefetch(const char* base, long long total) {
  const long long n = total / 128, workers = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += workers)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + c * 128));
}

__global__ void stream_read(const uint4* p, long long n16, unsigned* sink) {
  unsigned acc = 0;
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n16;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void spin(long long ns) {
  long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > ns) break;
  }
}

__global__ void empty() {}

static char* A;
static char* F;
static unsigned* sink;
static const long long kFlush = 512ll << 20;
static int sms;

static void flush() { stream_read<<<sms * 4, 512>>>(reinterpret_cast<uint4*>(F), kFlush / 16, sink); }

template <typename L>
static float timed(L launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1000.f;
}

template <typename Pre, typename L>
static float median_us(Pre pre, L launch, int reps = 7) {
  std::vector<float> v;
  for (int i = 0; i < reps; ++i) {
    pre();
    v.push_back(timed(launch));
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int l2 = 0;
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
  printf("SMs %d, L2 %d MiB\n", sms, l2 >> 20);
  CK(cudaMalloc(&A, 64ll << 20));
  CK(cudaMalloc(&F, kFlush));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(A, 1, 64ll << 20));
  CK(cudaMemset(F, 2, kFlush));
  auto nop = [] {};
  const float base = median_us(nop, [] { empty<<<1, 32>>>(); });
  printf("empty kernel: %.1f us (event overhead, subtract)\n", base);

  printf("\nbulk prefetch kernel time (us), after a flush: ctas x issuers/cta, chunk, MiB\n");
  for (int ctas : {9, 32, 132, 264})
    for (int issuers : {1, 32, 128})
      for (int chunk : {4096, 16384, 65536, 1 << 20})
        for (long long mib : {8, 24}) {
          const long long total = mib << 20;
          if (total / chunk < ctas * issuers / 8 && chunk > 65536) continue;
          const float us = median_us(flush, [&] { bulk_prefetch<<<ctas, 128>>>(A, total, chunk, issuers); });
          printf("bulk  ctas %3d issuers %3d chunk %7d  %2lld MiB: %7.1f us  (%.2f TB/s if it waits)\n",
                 ctas, issuers, chunk, mib, us, total / (us - base) / 1e6);
        }
  printf("\nline prefetch kernel time (us): ctas x 128 threads, MiB\n");
  for (int ctas : {9, 32, 132, 264})
    for (long long mib : {8, 24}) {
      const long long total = mib << 20;
      const float us = median_us(flush, [&] { line_prefetch<<<ctas, 128>>>(A, total); });
      printf("line  ctas %3d  %2lld MiB: %7.1f us\n", ctas, mib, us);
    }

  printf("\nstreaming read (132x4 CTAs x 512): cold (after a flush), after a bulk prefetch + 40 us, after a read (L2 reuse)\n");
  for (long long mib : {8, 16, 24, 32, 40}) {
    const long long total = mib << 20;
    auto read = [&] { stream_read<<<sms * 4, 512>>>(reinterpret_cast<uint4*>(A), total / 16, sink); };
    const float cold = median_us(flush, read);
    const float pre = median_us(
        [&] { flush(); bulk_prefetch<<<sms, 128>>>(A, total, 16384, 128); spin<<<1, 1>>>(40000); }, read);
    const float prel = median_us(
        [&] { flush(); line_prefetch<<<sms * 2, 128>>>(A, total); spin<<<1, 1>>>(40000); }, read);
    const float warm = median_us([&] { flush(); read(); }, read);
    printf("read %2lld MiB: cold %6.1f  bulk-prefetched %6.1f  line-prefetched %6.1f  reread %6.1f us (%.2f / %.2f / %.2f / %.2f TB/s)\n",
           mib, cold, pre, prel, warm, total / (cold - base) / 1e6, total / (pre - base) / 1e6,
           total / (prel - base) / 1e6, total / (warm - base) / 1e6);
  }
  CK(cudaDeviceSynchronize());
  return 0;
}

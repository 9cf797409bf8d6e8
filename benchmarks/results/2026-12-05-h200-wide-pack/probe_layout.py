"""Does the wide GEMV's weight layout bound its streaming rate? A probe, not product code.

The wide kernel (csrc/decode_gemv_wide.cuh) streams a warp's 16-row tile in chunks of 64 columns:
each chunk is 16 runs of 128 bytes, one a row, 4 KiB apart at K = 2,048. This kernel streams the
same bytes with the same grid, warps, cp.async ring and waits, and only the addresses change:

  rows<B>   : a chunk is 16 runs of B bytes, one a row (the row-major weight; B = 128 is the kernel)
  packed<C> : a chunk is one contiguous run of C bytes (a weight packed at load, tile by tile)

Each variant runs over 16 distinct matrices (so every call streams from HBM) in one CUDA graph;
median us per call and GB/s. `python probe_layout.py [out.json]`.
"""

import json
import statistics
import sys

import torch
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ void cp16(void* s, const void* g) {
  unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(s));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(d), "l"(g));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void wait_n() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}

// VECS: 16-byte vectors a lane copies per row half and chunk (a chunk: 16 rows x VECS * 64 bytes);
// D: ring stages. PACKED: the chunk is contiguous (lane order), else 16 row runs.
template <int VECS, int D, bool PACKED>
__global__ void __launch_bounds__(256) stream(const uint4* w, int K, uint4* out) {
  constexpr int kStage = 2 * VECS * 32;  // vectors
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int S = gridDim.x, rank = blockIdx.x;
  const int tile = blockIdx.y * 8 + warp;
  const int kv = K / 8;                       // row length in vectors
  const int kc = kv / S, k0 = rank * kc;      // this CTA's vectors of a row
  const int chunks = kc / (4 * VECS);
  uint4* ring = smem + warp * D * kStage;
  const uint4* r0 = w + (int64_t)(tile * 16 + g) * kv + k0 + q;
  const uint4* r1 = w + (int64_t)(tile * 16 + g + 8) * kv + k0 + q;
  const uint4* p = w + ((int64_t)tile * kv * 16) + (int64_t)k0 * 16 + lane;
  auto issue = [&](int j) {
    if (j < chunks) {
      uint4* st = ring + (j % D) * kStage;
#pragma unroll
      for (int v = 0; v < VECS; ++v) {
        if (PACKED) {
          cp16(st + v * 32 + lane, p + (int64_t)j * kStage + v * 32);
          cp16(st + (VECS + v) * 32 + lane, p + (int64_t)j * kStage + (VECS + v) * 32);
        } else {
          const int c = j * 4 * VECS + 4 * v;
          cp16(st + v * 32 + lane, r0 + c);
          cp16(st + (VECS + v) * 32 + lane, r1 + c);
        }
      }
    }
    commit();
  };
#pragma unroll
  for (int s = 0; s < D - 1; ++s) issue(s);
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int j = 0; j < chunks; ++j) {
    issue(j + D - 1);
    wait_n<D - 1>();
    const uint4* st = ring + (j % D) * kStage;
#pragma unroll
    for (int v = 0; v < 2 * VECS; ++v) {
      uint4 x = st[v * 32 + lane];
      acc.x ^= x.x; acc.y ^= x.y; acc.z ^= x.z; acc.w ^= x.w;
    }
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) out[0] = acc;
}

void run(torch::Tensor w, torch::Tensor out, int64_t mode, int64_t split) {
  const int N = w.size(0), K = w.size(1);
  dim3 grid(split, N / 16 / 8), block(256);
  auto* wp = reinterpret_cast<const uint4*>(w.data_ptr());
  auto* op = reinterpret_cast<uint4*>(out.data_ptr());
  auto s = c10::cuda::getCurrentCUDAStream().stream();
#define L(V, D, P) { size_t sm = 8 * D * 2 * V * 32 * 16; \
    cudaFuncSetAttribute(stream<V, D, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm); \
    stream<V, D, P><<<grid, block, sm, s>>>(wp, K, op); }
  switch (mode) {
    case 0: L(2, 8, false); break;
    case 1: L(2, 8, true); break;
    case 2: L(4, 4, false); break;
    case 3: L(4, 4, true); break;
    case 4: L(8, 2, false); break;
    case 5: L(2, 12, false); break;
    case 6: L(2, 12, true); break;
  }
}
"""
NAMES = {
    0: "rows128 x8",
    1: "packed2K x8",
    2: "rows256 x4",
    3: "packed4K x4",
    4: "rows512 x2",
    5: "rows128 x12",
    6: "packed2K x12",
}

ext = load_inline(
    "probe_layout",
    cpp_sources="void run(torch::Tensor w, torch::Tensor out, int64_t mode, int64_t split);",
    cuda_sources=SRC,
    functions=["run"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
)


def per_call_us(ws: list[torch.Tensor], out: torch.Tensor, mode: int, split: int) -> float:
    def step() -> None:
        for w in ws:
            ext.run(w, out, mode, split)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        graph.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(40):
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / len(ws))
    return statistics.median(times)


rows = []
out = torch.zeros(4, dtype=torch.int32, device="cuda")
for name, n, k, split in (
    ("gate_up", 16384, 2048, 1),
    ("down", 2048, 8192, 8),
    ("lm_head_part", 65536, 2048, 1),
):
    ws = [torch.randn(n, k, device="cuda").bfloat16() for _ in range(16 if n < 65536 else 4)]
    mb = n * k * 2 / 1e6
    line = f"{name:13s} {mb:5.1f} MB split {split}:"
    for rnd in range(2):  # two rounds, in turns
        for mode, label in NAMES.items():
            if split > 1 and mode in (4,):
                continue
            us = per_call_us(ws, out, mode, split)
            rows.append(
                dict(
                    shape=name,
                    mb=mb,
                    split=split,
                    variant=label,
                    round=rnd,
                    us=us,
                    gbps=mb * 1e3 / us,
                )
            )
            line += f" | {label} {us:.1f} us {mb * 1e3 / us:.0f} GB/s"
        print(line, flush=True)
        line = " " * len(line.split(":")[0]) + " "
    del ws
    torch.cuda.empty_cache()
with open(sys.argv[1] if len(sys.argv) > 1 else "probe_layout.json", "w") as f:
    json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)

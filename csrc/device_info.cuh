// Host-side facts about a CUDA device, read once per device and kept for the process.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>

namespace vgraph {

// Streaming multiprocessors of `device` (0 until first asked; every caller stores the same value).
inline int num_sms(int device) {
  static std::array<std::atomic<int>, 64> counts{};
  std::atomic<int>& n = counts.at(static_cast<size_t>(device));
  int v = n.load(std::memory_order_relaxed);
  if (v == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
    n.store(v, std::memory_order_relaxed);
  }
  return v;
}

// Streaming multiprocessors of the current device.
inline int num_sms() {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  return num_sms(device);
}

}  // namespace vgraph

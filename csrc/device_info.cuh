// Host-side facts about a CUDA device, read once per device and kept for the process.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>

namespace vgraph {

// cudaDeviceGetAttribute(A, device), cached (0 until first asked; every caller stores the same).
template <cudaDeviceAttr A>
int device_attribute(int device) {
  static std::array<std::atomic<int>, 64> values{};
  std::atomic<int>& slot = values.at(static_cast<size_t>(device));
  int v = slot.load(std::memory_order_relaxed);
  if (v == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&v, A, device));
    slot.store(v, std::memory_order_relaxed);
  }
  return v;
}

inline int current_device() {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Streaming multiprocessors of `device` (of the current device).
inline int num_sms(int device) { return device_attribute<cudaDevAttrMultiProcessorCount>(device); }
inline int num_sms() { return num_sms(current_device()); }

// The major compute capability of `device` (9 on Hopper: thread-block clusters, PDL).
inline int compute_major(int device) {
  return device_attribute<cudaDevAttrComputeCapabilityMajor>(device);
}

}  // namespace vgraph

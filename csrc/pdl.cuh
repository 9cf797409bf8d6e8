// Programmatic dependent launch (PDL, sm_90): a kernel launched with programmatic stream
// serialization may start while the previous kernel of the stream is still running; it does its
// independent prologue (weight loads, metadata lookups), then `pdl_wait()` blocks until the
// previous kernel has finished and its writes are visible. `pdl_launch_dependents()` lets the next
// kernel start early. Both are no-ops in a launch without the attribute, and on older devices.
// Works inside CUDA graphs: capture records the programmatic edge (tests/kernels check replays).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>

namespace vgraph {
namespace pdl {

__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// VGRAPH_PDL=0 turns programmatic dependent launch off (for comparisons).
inline bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("VGRAPH_PDL");
    return v == nullptr || v[0] != '0';
  }();
  return on;
}

// A launch configuration with the programmatic-serialization attribute set as enabled() says
// (and `allow`: a launcher's own choice). `attr` must outlive the launch call.
inline cudaLaunchConfig_t launch_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                        cudaLaunchAttribute* attr, bool allow = true) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = enabled() && allow ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

}  // namespace pdl
}  // namespace vgraph

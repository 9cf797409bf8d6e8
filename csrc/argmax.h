// Greedy tokens on CUDA (sampling_cuda.cu), for the sampler's argmax_rows op and for the LM head ops
// of decode_cuda.cu. Host code only.
#pragma once

#include <ATen/ATen.h>

namespace vgraph {

// out int64 [R] = the index of each row's largest entry of logits [R, V] (float32 or 16-bit,
// contiguous rows), torch.argmax's choice (NaN above every number, the lowest index among
// equals), on the current stream. With `widened` (float32 [R, V], contiguous rows) 16-bit logits
// are also written there as float32, in the same pass: the LM head's widening copy and the argmax
// in one read of its output. `state` (int64, zero between launches and left zero: the LM head
// ops' greedy_state) lets a row's CTAs meet through global atomics on its pair (key, count) rather
// than in a thread-block cluster, where it holds 2 R entries and VGRAPH_ARGMAX_ATOMIC=1.
void launch_argmax_rows(const at::Tensor& out, const at::Tensor& logits, const at::Tensor* widened,
                        const at::Tensor* state);

}  // namespace vgraph

// Host entry points of decode_cuda.cu's ops that other CUDA translation units call
// (decode_mlp.cu's fallback).
#pragma once

#include <optional>

#include <ATen/ATen.h>

namespace vgraph {

// residual += linear_add_residual(silu_and_mul(rms_norm(residual) W_gu^T), down): the CUDA impls
// of rms_norm_gate_up_silu (with wide_packed) and linear_add_residual, one after the other, with
// their per-shape tables' kernels; the activations in a temporary [M, I].
void mlp_two_ops_cuda(at::Tensor& residual, const at::Tensor& norm_weight, double eps,
                      const at::Tensor& gate_up, const at::Tensor& down,
                      const std::optional<at::Tensor>& wide_packed);

}  // namespace vgraph

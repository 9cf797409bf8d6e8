// The vgraph_C op library: schemas only. Each device's kernels register their own impls
// (attention_cpu.cpp / cache_cpu.cpp / layers_cpu.cpp for CPU, the *_cuda.cu twins for CUDA), so this
// file never changes when a kernel does. Fake (meta) impls live in vgraph/_ext.py.
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(vgraph_C, m) {
  // key/value: [num_tokens, num_kv_heads, head_dim]; caches: [num_blocks, block_size,
  // num_kv_heads, head_dim]; slot_mapping: int64 [num_tokens], -1 = pad token (skipped).
  m.def(
      "reshape_and_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
      "Tensor slot_mapping) -> ()");
  // out/query: [num_tokens, num_heads, head_dim]; query_start_loc: int32 [num_reqs_padded + 1];
  // seq_lens: int32 [num_reqs_padded]; block_table: int32 [num_reqs_padded, max_blocks_per_req].
  // num_reqs (default seq_lens.size(0)) bounds the requests looked at; it is a launch-time
  // constant, like every other size here. key/value/slot_mapping (reshape_and_cache's, all or
  // none): the append, this step's K/V written to the cache by the same launch first.
  m.def(
      "paged_attention(Tensor(a!) out, Tensor query, Tensor(b!) key_cache, "
      "Tensor(c!) value_cache, Tensor query_start_loc, Tensor seq_lens, Tensor block_table, "
      "float scale, int? num_reqs=None, Tensor? key=None, Tensor? value=None, "
      "Tensor? slot_mapping=None) -> ()");
  // Cascade attention (cascade_cpu.cpp / cascade_cuda.cu): paged_attention's result, computed
  // as one non-causal pass of every query token over the first num_prefix_blocks blocks (the same
  // for every request: block_table row 0's; every query must sit after them), one causal pass of
  // each request over its remaining positions, and a merge by log-sum-exp.
  m.def(
      "cascade_attention(Tensor(a!) out, Tensor query, Tensor key_cache, Tensor value_cache, "
      "Tensor query_start_loc, Tensor seq_lens, Tensor block_table, int num_prefix_blocks, "
      "float scale, int? num_reqs=None) -> ()");

  // Fused layer ops (layers_cpu.cpp / layers_cuda.cu). Rows may be strided; the last dim is
  // contiguous. Dtypes float32 / float16 / bfloat16, math in float32.
  // out/input: [num_tokens, hidden]; weight: [hidden]. out = weight * (x * rsqrt(mean(x^2) + eps))
  // .to(dtype), rounded as Hugging Face's LlamaRMSNorm rounds.
  m.def("rms_norm(Tensor(a!) out, Tensor input, Tensor weight, float eps) -> ()");
  // In place: residual = input + residual (in the dtype); input = rms_norm(residual).
  m.def(
      "fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps) -> ()");
  // In place, neox (rotate-half) style: positions int64/int32 [num_tokens]; query
  // [num_tokens, num_heads * head_size]; key [num_tokens, num_kv_heads * head_size];
  // cos_sin_cache float32 [max_position, rot_dim] = cos | sin; the first rot_dim dims of each head
  // are rotated.
  m.def(
      "rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!) key, int head_size, "
      "Tensor cos_sin_cache, bool is_neox) -> ()");
  // input: [num_tokens, 2 * d] = gate | up; out: [num_tokens, d] = silu(gate) * up.
  m.def("silu_and_mul(Tensor(a!) out, Tensor input) -> ()");
  // The token embedding's rows of this rank: ids int64/int32 [num_tokens], each in
  // [0, vocab_size); weight [rows, hidden]; out [num_tokens, hidden] = weight[id - start] for ids
  // in [start, end), zeros for the others (another rank's rows under tensor parallelism).
  m.def(
      "embedding(Tensor(a!) out, Tensor ids, Tensor weight, int start, int end, int vocab_size) "
      "-> ()");

  // Fused decode ops (decode_cpu.cpp / decode_cuda.cu): a projection with its neighbours fused in.
  // x / hidden: [num_tokens, K], rows may be strided; weight: [N, K] contiguous; 16-bit or float32,
  // float32 accumulation, rounded to the dtype where the unfused layers round. CUDA runs a GEMV
  // kernel when num_tokens <= max_gemv_tokens (None: a per-shape default from measurements; 0:
  // never) and cuBLAS otherwise; the CPU always runs the unfused sequence.
  // out [num_tokens, N] = x W^T, in x's dtype or float32 (logits: rounded to x's dtype first).
  // With greedy (int64 [num_tokens]) also each token's argmax of out, torch.argmax's choice, so
  // the head of a graph hands back its greedy tokens; on CUDA in the looping one-token GEMV's
  // epilogue (greedy_state: int64 [128], zeroed once, its scratch: a (key, count) pair a row),
  // else by an argmax kernel after the GEMV or in the pass that widens cuBLAS's output.
  m.def(
      "linear_out(Tensor(a!) out, Tensor x, Tensor weight, int? max_gemv_tokens=None, "
      "Tensor(b!)? greedy=None, Tensor(c!)? greedy_state=None) -> ()");
  // out = linear_out(rms_norm(hidden)): the final norm and the LM head.
  m.def(
      "rms_norm_linear_out(Tensor(a!) out, Tensor hidden, Tensor norm_weight, float eps, "
      "Tensor weight, int? max_gemv_tokens=None, Tensor(b!)? greedy=None, "
      "Tensor(c!)? greedy_state=None) -> ()");
  // residual [num_tokens, N] = (x W^T).to(dtype) + residual, rounded (the residual-stream add).
  m.def(
      "linear_add_residual(Tensor(a!) residual, Tensor x, Tensor weight, "
      "int? max_gemv_tokens=None) -> ()");
  // qkv [num_tokens, (num_heads + 2 * num_kv_heads) * head_size] = rms_norm(hidden) W^T (+ bias),
  // then neox RoPE on the q and k heads when positions / cos_sin_cache [max_position, head_size]
  // are given (rotary over whole heads). On CUDA the fused kernel reads the weights, the bias,
  // positions and cos_sin_cache before its PDL wait: none of them may be written by the kernels
  // just before it on the stream (in the model they are weights and a step input). unit_norm:
  // norm_weight is ones (the model folded the norm's weight into W), so the unfused path may
  // scale the GEMM's output rows by 1 / rms instead of normalizing hidden in a kernel before it.
  m.def(
      "rms_norm_qkv_rope(Tensor(a!) qkv, Tensor hidden, Tensor norm_weight, float eps, "
      "Tensor weight, Tensor? bias, Tensor? positions, Tensor? cos_sin_cache, int head_size, "
      "int num_heads, int num_kv_heads, int? max_gemv_tokens=None, bool unit_norm=False, "
      "Tensor? wide_packed=None) -> ()");
  // out [num_tokens, I] = silu_and_mul(rms_norm(hidden) W^T), W [2 * I, K] = gate rows | up rows.
  m.def(
      "rms_norm_gate_up_silu(Tensor(a!) out, Tensor hidden, Tensor norm_weight, float eps, "
      "Tensor weight, int? max_gemv_tokens=None, Tensor? wide_packed=None) -> ()");
  // The norm ops' wide_packed: their weight packed for the wide tensor-core kernel (CUDA, sm_90;
  // csrc/decode_gemv_wide.cuh), one contiguous run a warp's chunk of 16 rows x 64 columns where
  // the row-major weight has 16 runs of 128 bytes. Read by that kernel only: every other path
  // reads weight. pack_wide_weight makes it (CUDA only): epilogue "gate_up" (W = gate rows | up
  // rows), "qkv" (rotate-half pairs of head_size heads) or "plain".
  m.def("pack_wide_weight(Tensor weight, str epilogue, int head_size=0) -> Tensor");
  // The token count from which the fused op of weight's shape runs the wide kernel by default;
  // 0: never (the CPU, GPUs before sm_90, the per-shape table's choice).
  m.def("wide_gemv_from(Tensor weight, str epilogue, int head_size=0) -> int");
  // A decoder layer's MLP on the residual stream, in place: residual [num_tokens, H] +=
  // silu_and_mul(rms_norm(residual) W_gu^T) W_d^T, gate_up_weight W_gu [2 * I, H] (gate rows |
  // up rows), down_weight W_d [H, I]: rms_norm_gate_up_silu (with wide_packed), then
  // linear_add_residual. On CUDA, given state (int64 [>= (I + 3) / 4 + 2], zeroed once: the
  // kernel's scratch), up to max_fused_tokens (default fused_mlp_tokens: 1 for the measured
  // shapes, else 0) tokens one kernel instead (csrc/decode_mlp.cu).
  m.def(
      "rms_norm_mlp_residual(Tensor(a!) residual, Tensor norm_weight, float eps, "
      "Tensor gate_up_weight, Tensor down_weight, Tensor(b!)? state=None, "
      "Tensor? wide_packed=None, int? max_fused_tokens=None) -> ()");
  // The token count up to which rms_norm_mlp_residual runs its one kernel by default for this
  // gate/up shape; 0: never (the CPU, shapes not measured).
  m.def("fused_mlp_tokens(Tensor gate_up_weight) -> int");

  // Logits processors of a sampling step in one pass (sampling_cuda.cu; CUDA only: the CPU runs
  // the torch path of vgraph/sample/logits_processors.py). out/logits float32 [R, V]; per row r,
  // entries row_ptr[r]..row_ptr[r + 1] of codes (token_id << 3 | kind: 0 output token, 1 prompt
  // token, 2 logit_bias with its value, 3 banned, 4 allowed) and values; params [R, 4] =
  // presence, frequency, repetition, restricted (1: only allowed entries stay); bitmask int32
  // [R, ceil(V / 32)], bit t % 32 of word t // 32 set = token t allowed.
  m.def(
      "apply_logits_processors(Tensor(a!) out, Tensor logits, Tensor? bitmask, Tensor row_ptr, "
      "Tensor codes, Tensor values, Tensor params) -> ()");

  // Greedy tokens (sampling_cuda.cu; CUDA only: the CPU runs torch.argmax): out int64 [R] = the
  // index of each row's largest float32 logit, torch.argmax's choice (NaN above every number,
  // the lowest index among equals), one CTA per row.
  m.def("argmax_rows(Tensor(a!) out, Tensor logits) -> ()");
}

// Lets `import vgraph._C` load the library too (torch.ops.load_library is the usual way).
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, 0, nullptr};
  return PyModule_Create(&module_def);
}

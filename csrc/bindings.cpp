// The vgraph_C op library: schemas only. Each device's kernels register their own impls
// (attention_cpu.cpp / cache_cpu.cpp for CPU, attention_cuda.cu / cache_cuda.cu for CUDA), so this
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
  // constant, like every other size here.
  m.def(
      "paged_attention(Tensor(a!) out, Tensor query, Tensor key_cache, Tensor value_cache, "
      "Tensor query_start_loc, Tensor seq_lens, Tensor block_table, float scale, "
      "int? num_reqs=None) -> ()");
}

// Lets `import vgraph._C` load the library too (torch.ops.load_library is the usual way).
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, 0, nullptr};
  return PyModule_Create(&module_def);
}

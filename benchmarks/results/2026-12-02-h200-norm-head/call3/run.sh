#!/usr/bin/env bash
# 2026-12-02 (fifth pass), call 3: the rest of the CUDA-graph GPU tests on the final tree (Qwen3-0.6B's
# LM head back on the norm kernel + cuBLAS, so the fused-decode test again), async
# scheduling on (the default on CUDA): PIECEWISE / FULL_AND_PIECEWISE against NONE, the graph-mode
# end-to-end file, cascade, the graph pool, the sampling tests (structured outputs with xgrammar),
# then FlashInfer (its JIT compile first: about 105 s). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHINFER_WORKSPACE_BASE=$HOME
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py tests/gpu/test_piecewise_gpu.py tests/e2e/test_graph_modes.py \
  tests/gpu/test_cascade_gpu.py tests/gpu/test_graph_pool_gpu.py tests/gpu/test_sampling_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
t0=$SECONDS; timeout 215 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_flashinfer_gpu.py tests/gpu/test_flashinfer_sampling_gpu.py > $o/tests_fi.log 2>&1
echo "flashinfer tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_fi.log; grep -E "^FAILED|^ERROR" $o/tests_fi.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

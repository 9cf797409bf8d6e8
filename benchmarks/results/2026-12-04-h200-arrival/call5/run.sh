#!/usr/bin/env bash
# 2026-12-04, call 5: the GPU tests the eleventh pass's session left unrun (graph pool, piecewise,
# sampling), with the engine tests (transformers parity) and greedy NONE = FULL, on this tree.
o=$OUT; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
set -o pipefail
t0=$SECONDS; timeout 330 python3 -m pytest -v -p no:cacheprovider tests/gpu/test_graph_pool_gpu.py tests/gpu/test_sampling_gpu.py \
  tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py tests/gpu/test_piecewise_gpu.py 2>&1 | tee $o/tests_gpu.log | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" | cut -c1-150
echo "gpu tests rc=$? in $((SECONDS-t0)) s"

#!/usr/bin/env bash
# 2026-12-03 (ninth pass), call 5, the final tree: the GPU tests call 4's time limit did not reach
# (piecewise graphs, the graph pool, sampling; the paged-attention kernel tests), engine core in
# its own process. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 190 python3 -m pytest -q -p no:cacheprovider -rA tests/gpu/test_piecewise_gpu.py tests/gpu/test_graph_pool_gpu.py \
  tests/gpu/test_sampling_gpu.py tests/kernels/test_paged_attention.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; grep -E "passed|failed" $o/tests.log | tail -1; grep -E "^FAILED|^ERROR" $o/tests.log | head -8; grep -c "^PASSED" $o/tests.log
cd $OUT && tar czf results.tgz r && rm -rf r

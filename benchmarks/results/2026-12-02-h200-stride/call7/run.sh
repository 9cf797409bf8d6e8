#!/usr/bin/env bash
# 2026-12-02, call 7: the final tree's remaining CUDA-graph tests (sampling across graph modes,
# structured outputs and prompt logprobs on CUDA, the graph pool). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 70 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_sampling_gpu.py tests/gpu/test_graph_pool_gpu.py \
  > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (eighth pass), call 2: call 1's tree. Builds csrc; the engine loop with the O
# projection in its own launch (VGRAPH_ATTN_O_PROJ_TOKENS=0) against the default, SmolLM2-135M;
# the CUDA-graph GPU tests with the engine core in its own process (engine, async scheduling,
# graph pool, sampling) and the decode-op kernel tests. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
for v in fused o_apart fused2 o_apart2; do
  t0=$SECONDS; case $v in o_apart*) export VGRAPH_ATTN_O_PROJ_TOKENS=0;; *) unset VGRAPH_ATTN_O_PROJ_TOKENS;; esac
  timeout 45 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M --batch-sizes 1 4 16 \
    --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_$v.json > $o/async_$v.log 2>&1
  echo "async $v rc=$? in $((SECONDS-t0)) s"; grep -A4 "^model" $o/async_$v.log
done
unset VGRAPH_ATTN_O_PROJ_TOKENS
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_engine_gpu.py \
  tests/gpu/test_async_scheduling_gpu.py tests/gpu/test_graph_pool_gpu.py tests/gpu/test_sampling_gpu.py \
  tests/kernels/test_decode_ops.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

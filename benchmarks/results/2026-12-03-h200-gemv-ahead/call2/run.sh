#!/usr/bin/env bash
# 2026-12-03 (eighth pass), call 2: the final tree (the seventh pass's kernels, c24951f's csrc).
# Builds csrc; serving TPOT at concurrency 1 through a real server (SmolLM2-135M, engine core in
# its own process, default mode and capture list); every GPU test with the engine core in its own
# process (tests/gpu, FlashInfer included; tensor parallelism skips on one GPU) and the kernel
# tests. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; STEPS="serve" timeout 80 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/run.log 2>/dev/null | tail -2
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=1 timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu \
  tests/kernels/test_decode_ops.py tests/kernels/test_paged_attention.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-02 (fourth pass), call 3: seeded sampling's reproducibility on dummy bf16 weights, sync
# and async engines each twice (probe.py: call 2's async GPU test found seeded tokens unequal);
# the rest of the GPU tests under the new default (async
# scheduling on CUDA): PIECEWISE / FULL_AND_PIECEWISE against NONE, the FlashInfer backend (its
# planner's pinned buffers under overlapping steps), the graph-mode end-to-end file on CUDA; then
# `vgraph bench latency` (vLLM's meaning: batch 8, 32 + 128 tokens, the default engine) with and
# without async scheduling, SmolLM2-135M. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHINFER_WORKSPACE_BASE=$HOME
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 120 python3 benchmarks/results/2026-12-02-h200-async/call3/probe.py SmolLM2-135M FULL > $o/probe.log 2>&1
echo "probe rc=$? in $((SECONDS-t0)) s"; grep " vs \|in one engine" $o/probe.log
t0=$SECONDS; timeout 250 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_piecewise_gpu.py tests/gpu/test_flashinfer_gpu.py \
  tests/e2e/test_graph_modes.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
for m in SmolLM2-135M; do for flag in --no-async-scheduling --async-scheduling; do
  t0=$SECONDS; timeout 100 python3 -m vgraph.entrypoints.cli bench latency --model $m --load-format dummy --input-len 32 \
    --output-len 128 --batch-size 8 --num-iters-warmup 3 --num-iters 10 $flag --output-json $o/latency_${m}${flag}.json > $o/latency_${m}${flag}.log 2>&1
  echo "latency $m $flag rc=$? in $((SECONDS-t0)) s: $(grep '50% percentile' $o/latency_${m}${flag}.log)"; done; done
cd $OUT && tar czf results.tgz r && rm -rf r

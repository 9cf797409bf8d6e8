#!/usr/bin/env bash
# 2026-12-05 (thirtieth pass), call 3: the issue-12 targets on the final tree, the one-kernel MLP
# in its barrier form only (the atomic form removed), 6 stages by default (call 2). Its op tests;
# greedy FULL = NONE with FULL's engine core in its own process (1, 5 and 13 requests, the three
# shipped configs) and the engine's GPU tests; Llama-3.2-1B's batch-1 step in turns, the two
# fused ops against the one kernel, with each layer's kernel times; then benchmarks/run_gpu.sh's
# steps: the engine loop (SmolLM2-135M and Llama-3.2-1B, batch 1-16, async), the kernels of a
# SmolLM2-135M step (torch profiler), and `vgraph serve` (engine core in its own process, default
# mode and capture list) driven by `vgraph bench serve` at concurrency 1 for both models.
# About 350 s; timeout 590.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
STEPS="ext" bash benchmarks/run_gpu.sh $o
t0=$SECONDS; timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_mlp_op.py \
  tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8; pack
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 90 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/llama1 \
  --models Llama-3.2-1B --variants env:VGRAPH_FUSED_MLP_TOKENS=0 fused -- --modes FULL --num-iters 400 \
  --batch-sizes 1 > $o/llama1.log 2>&1
echo "llama1 rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/llama1.log | grep "B="
python3 $layer $o/llama1/latency_*.json; pack
STEPS="async profile serve" SERVE_MODELS="SmolLM2-135M Llama-3.2-1B" bash benchmarks/run_gpu.sh $o
cd $OUT && tar czf results.tgz r && rm -rf r

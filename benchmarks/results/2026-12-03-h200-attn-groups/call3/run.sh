#!/usr/bin/env bash
# 2026-12-03 (sixth pass), call 3: the final tree (one head a CTA while 4 * num_tokens *
# num_heads <= SMs). Builds csrc; serving TPOT at concurrency 1 through a real server
# (SmolLM2-135M, engine core in its own process, the default mode and capture list, async
# scheduling on); the decode step at 1 / 2 / 4 tokens and 1,024 positions (fused = the rule,
# attn_gt8, attn_gt1); the engine loop, sync against async; then the CUDA-graph GPU tests:
# fused decode (NONE against FULL, greedy tokens), engine, async scheduling, cascade, the graph
# pool, sampling, piecewise. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; STEPS="serve" timeout 110 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/run.log 2>/dev/null | tail -2
t0=$SECONDS; timeout 45 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab_1024 --models Llama-3.2-1B Qwen3-0.6B \
  --variants fused attn_gt8 attn_gt1 -- --modes FULL --batch-sizes 1 2 4 --context-len 1024 > $o/ab_1024.log 2>&1
echo "ab_1024 rc=$? in $((SECONDS-t0)) s"; grep -A8 "^decode step, median" $o/ab_1024.log
t0=$SECONDS; timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 8 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A12 "^model" $o/async_step.log
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=1 timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py \
  tests/gpu/test_engine_gpu.py tests/gpu/test_async_scheduling_gpu.py tests/gpu/test_cascade_gpu.py tests/gpu/test_graph_pool_gpu.py \
  tests/gpu/test_sampling_gpu.py tests/gpu/test_piecewise_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

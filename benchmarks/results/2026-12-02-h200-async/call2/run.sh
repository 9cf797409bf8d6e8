#!/usr/bin/env bash
# 2026-12-02 (fourth pass), call 2: async scheduling on by default on CUDA; the steady-state feed
# as one device-to-device copy, the sampled ids kept by reference. Builds csrc; the GPU tests of
# the engine under the new default (async, engine, fused decode, sampling, cascade, graph pool);
# the decode step with and without async scheduling in the engine loop (5 rounds); serving TPOT
# at concurrency 1 with --no-async-scheduling and with the default. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 150 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 8 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A12 "^model" $o/async_step.log
for tag in sync async; do args=""; [ $tag = sync ] && args="--no-async-scheduling"
  t0=$SECONDS; SERVE_ARGS="$args" SERVE_TAG="_$tag" STEPS="serve" timeout 110 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
  echo "serve $tag in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/run.log 2>/dev/null | tail -2; done
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=1 timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_async_scheduling_gpu.py \
  tests/gpu/test_engine_gpu.py tests/gpu/test_fused_decode_gpu.py tests/gpu/test_sampling_gpu.py tests/gpu/test_cascade_gpu.py \
  tests/gpu/test_graph_pool_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (seventh pass), call 2: the looping one-token GEMV with the small-matrix rule (a
# matrix of at most 4 MiB loops at 2 CTAs an SM; a larger one loops at its occupancy where its
# CTAs exceed one wave); the shared-memory staging of call 1 removed; Qwen3-0.6B's final norm +
# LM head on the fused kernel at one token. Builds csrc; the decode step at one token, variants
# in turns (fused, no_loop, small_off = call 1's rule, small1, small3, small16) for the three
# configs; the engine loop, sync against async; the decode-op kernel tests; the per-op benchmark
# at one token; serving TPOT at concurrency 1 through a real server (SmolLM2-135M, engine core in
# its own process, default mode and capture list); the CUDA-graph GPU tests (fused decode NONE
# against FULL, engine, async scheduling, cascade, graph pool, sampling, piecewise). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 150 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab_1 --models SmolLM2-135M Llama-3.2-1B Qwen3-0.6B \
  --variants fused no_loop small_off small1 small3 small16 -- --modes FULL --batch-sizes 1 > $o/ab_1.log 2>&1
echo "ab_1 rc=$? in $((SECONDS-t0)) s"; grep -A18 "^decode step, median" $o/ab_1.log; grep -E "decode_1 " $o/ab_1.log | cut -c1-100
t0=$SECONDS; timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A7 "^model" $o/async_step.log
t0=$SECONDS; timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_kernels.py --tokens 1 --replays 20 --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernel bench rc=$? in $((SECONDS-t0)) s"; grep -A16 "^config" $o/decode_kernels.log | head -17
t0=$SECONDS; STEPS="serve" timeout 90 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/run.log 2>/dev/null | tail -2
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py \
  tests/gpu/test_engine_gpu.py tests/gpu/test_async_scheduling_gpu.py tests/gpu/test_cascade_gpu.py tests/gpu/test_graph_pool_gpu.py \
  tests/gpu/test_sampling_gpu.py tests/gpu/test_piecewise_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

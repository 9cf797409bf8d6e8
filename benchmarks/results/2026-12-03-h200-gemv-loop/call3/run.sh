#!/usr/bin/env bash
# 2026-12-03 (seventh pass), call 3: the final tree (call 2's rule, except that Llama-3.2-1B's
# gate/up keeps a CTA per group: its table entry forbids the loop). Builds csrc; the decode step
# at one token, variants in turns (fused, no_loop, loop_all = call 2's rule) for the three
# configs; the engine loop, sync against async; the decode-op kernel tests; the CUDA-graph GPU
# tests (fused decode NONE against FULL, engine, async scheduling with the engine core in its own
# process, graph pool, sampling). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 120 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab_1 --models SmolLM2-135M Llama-3.2-1B Qwen3-0.6B \
  --variants fused no_loop loop_all -- --modes FULL --batch-sizes 1 > $o/ab_1.log 2>&1
echo "ab_1 rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/ab_1.log; grep -E "decode_1 " $o/ab_1.log | cut -c1-100
t0=$SECONDS; timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A7 "^model" $o/async_step.log
t0=$SECONDS; timeout 100 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=1 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py \
  tests/gpu/test_engine_gpu.py tests/gpu/test_async_scheduling_gpu.py tests/gpu/test_graph_pool_gpu.py \
  tests/gpu/test_sampling_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

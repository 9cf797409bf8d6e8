#!/usr/bin/env bash
# 2026-12-02, call 5: the final tree (FULL graphs record the step's input copy; uniform decode
# keys skip the last-token gather). Build; GPU tests (decode ops, the fused model against
# transformers, NONE vs FULL greedy identity, the engine and cascade on the GPU, FULL graph modes
# on CUDA graphs, the input fill); the decode step, fused against copy_outside in turns, with
# kernel profiles; the step's timeline; serving TPOT at concurrency 1 (engine core in its own
# process). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py \
  tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py tests/gpu/test_cascade_gpu.py tests/e2e/test_graph_modes.py tests/worker/test_input_buffers.py \
  > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
t0=$SECONDS; timeout 130 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused copy_outside \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 4 8 16 > $o/ab.log 2>&1; echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A4 "variants timed in turns" $o/ab.log | tail -4
grep " kernels " $o/ab.log | grep "decode_1 \|decode_16" | cut -c1-150
t0=$SECONDS; timeout 60 python3 tools/profile_step.py --model SmolLM2-135M --batch 1 --modes FULL --mixed "" --out $o/profile_SmolLM2-135M.json \
  > $o/profile_SmolLM2-135M.log 2>&1; echo "profile rc=$? in $((SECONDS-t0)) s"; grep -E "timeline|replay alone" $o/profile_SmolLM2-135M.log
t0=$SECONDS; STEPS="serve" timeout 100 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1; echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/*.log | head -4
cd $OUT/r && tar czf ab.tgz ab && rm -rf ab; cd $OUT && tar czf results.tgz r && rm -rf r

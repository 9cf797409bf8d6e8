#!/usr/bin/env bash
# 2026-12-03 (eighth pass), call 1: the O projection in the attention launch (paged_attention's
# o_weight / residual; for up to 16 decode tokens where a head group's o_weight columns take at
# most 96 KiB: SmolLM2-135M; staged in shared memory where the grid fits the GPU at once, else
# prefetched into L2). Builds csrc; the attention op tests (GPU included); the decode step, fused
# against o_apart (the O projection in its own launch) and o_l2 (never staged), at 128 positions
# of context, and fused against o_apart at 1,024; the engine loop, sync against async
# (SmolLM2-135M and Llama-3.2-1B); serving TPOT at concurrency 1 through a real server
# (SmolLM2-135M, engine core in its own process, default mode and capture list); the model GPU
# tests with the engine core in its own process (fused decode NONE against FULL for the three
# configs, piecewise, cascade). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 80 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_paged_attention.py > $o/tests_attn.log 2>&1
echo "attn tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_attn.log; grep -E "^FAILED|^ERROR" $o/tests_attn.log | head -8
t0=$SECONDS; timeout 110 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab_128 --models SmolLM2-135M \
  --variants fused o_apart o_l2 -- --modes FULL --batch-sizes 1 4 8 16 > $o/ab_128.log 2>&1
echo "ab_128 rc=$? in $((SECONDS-t0)) s"; grep -A4 "^decode step, median" $o/ab_128.log; grep -E "decode_(1|16) " $o/ab_128.log | cut -c1-230
t0=$SECONDS; timeout 50 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab_1024 --models SmolLM2-135M \
  --variants fused o_apart -- --modes FULL --batch-sizes 1 --context-len 1024 > $o/ab_1024.log 2>&1
echo "ab_1024 rc=$? in $((SECONDS-t0)) s"; grep -A3 "^decode step, median" $o/ab_1024.log
t0=$SECONDS; timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A7 "^model" $o/async_step.log
t0=$SECONDS; STEPS="serve" timeout 80 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/run.log 2>/dev/null | tail -2
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=1 timeout 140 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py \
  tests/gpu/test_piecewise_gpu.py tests/gpu/test_cascade_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-02, call 5: the final tree (call 3's kernels; the input fill's padding shared by both
# paths). Build; GPU tests (op tests, attention, the fused model against transformers, NONE vs FULL
# greedy identity, the engine on the GPU); the decode step with kernel profiles; serving TPOT at
# concurrency 1 (engine core in its own process). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 170 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/kernels/test_paged_attention.py \
  tests/kernels/test_decode_model.py tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py tests/gpu/test_cascade_gpu.py tests/worker/test_input_buffers.py \
  > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused torch \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 4 8 16 > $o/ab.log 2>&1; echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A4 "variants timed in turns" $o/ab.log | tail -4
grep " kernels " $o/ab.log | grep "fused .*decode_1 \|fused .*decode_16" | cut -c1-200
t0=$SECONDS; STEPS="serve" timeout 90 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1; echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/*.log | head -4
cd $OUT/r && tar czf ab.tgz ab && rm -rf ab; cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-04, call 7: the wide GEMV in the table (Llama-3.2-1B's and Qwen3-0.6B's QKV and gate/up
# from two tokens on, the next kernel let in after its loop). Builds csrc; the layer-op and
# decode-op kernel tests; the decode step in turns against the path before it and against the
# early trigger; the engine loop, sync against async; greedy NONE = FULL; serving; the GPU tests.
# One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_layer_ops.py \
  tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
ab() {  # name, models, variants, bench args
  local name=$1 models=$2 variants=$3; shift 3; local t0=$SECONDS
  timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $models --variants $variants -- --modes FULL --num-iters 300 "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A6 "^decode step, median" $o/$name.log; grep -E "decode_(4|16) " $o/$name.log | cut -c1-200
}
ab llama Llama-3.2-1B "fused wide_off_llama wide_early" --batch-sizes 1 4 8 16
ab qwen Qwen3-0.6B "fused wide_off" --batch-sizes 4 8 16
cd $OUT && tar czf results.tgz r; cd - > /dev/null
t0=$SECONDS; timeout 70 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A7 "^model" $o/async_step.log
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8
cd $OUT && tar czf results.tgz r; cd - > /dev/null
t0=$SECONDS; STEPS="serve" timeout 80 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/run.log 2>/dev/null | tail -2
cd $OUT && tar czf results.tgz r; cd - > /dev/null
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu --ignore=tests/gpu/test_tensor_parallel_gpu.py \
  --ignore=tests/gpu/test_fused_decode_gpu.py > $o/tests_gpu.log 2>&1
echo "gpu tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_gpu.log; grep -E "^FAILED|^ERROR" $o/tests_gpu.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (tenth pass), call 3, the final tree (the layer kernels launched with PDL; the GEMV
# warps and attention as in the ninth pass). Builds csrc; the decode-op and layer-op kernel tests;
# Qwen3-0.6B's decode step in turns, with and without PDL on the layer kernels; the engine loop,
# sync against async, for the three shipped configs; serving; greedy NONE = FULL. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py \
  tests/kernels/test_layer_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
ab() {  # name, models, variants, bench args
  local name=$1 models=$2 variants=$3; shift 3; local t0=$SECONDS
  timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $models --variants $variants -- --modes FULL "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A6 "^decode step, median" $o/$name.log; grep -E "decode_(1|16) " $o/$name.log | cut -c1-230
}
ab qwen Qwen3-0.6B "fused pdl_layers_off" --batch-sizes 1 16
t0=$SECONDS; timeout 90 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B Qwen3-0.6B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A10 "^model" $o/async_step.log
t0=$SECONDS; STEPS="serve" timeout 80 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/run.log 2>/dev/null | tail -2
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

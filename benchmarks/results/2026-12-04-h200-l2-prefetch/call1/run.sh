#!/usr/bin/env bash
# 2026-12-04, call 1: decode attention prefetching the next projections' weights into L2
# (VGRAPH_L2_PREFETCH_MB, default 24). Builds csrc; the attention kernel tests; the decode step
# in turns against no prefetch, other budgets and the prefetch after the context loop; the
# engine loop, sync against async. One archive.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_paged_attention.py > $o/tests_attn.log 2>&1
echo "attention tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_attn.log; grep -E "^FAILED|^ERROR" $o/tests_attn.log | head -8
ab() {  # name, models, variants, bench args
  local name=$1 models=$2 variants=$3; shift 3; local t0=$SECONDS
  timeout 110 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $models --variants $variants -- --modes FULL --num-iters 300 "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A8 "^decode step, median" $o/$name.log; grep -E "decode_(1|4|16) " $o/$name.log | cut -c1-220
}
ab llama Llama-3.2-1B "fused l2_off l2_16 l2_48 l2_end" --batch-sizes 1 4 16
cd $OUT && tar czf results.tgz r; cd - > /dev/null
ab smollm2 SmolLM2-135M "fused l2_off l2_8 l2_end" --batch-sizes 1 4 16
cd $OUT && tar czf results.tgz r; cd - > /dev/null
ab qwen Qwen3-0.6B "fused l2_off l2_48" --batch-sizes 1 4 16
cd $OUT && tar czf results.tgz r; cd - > /dev/null
t0=$SECONDS; timeout 75 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A7 "^model" $o/async_step.log
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (sixth pass), call 2: the launcher's rule (one query head a CTA while
# num_tokens * num_heads <= SMs, else as many as the GQA ratio allows). Builds csrc; the kernel
# tests on CUDA (attention, cascade, the fused decode ops: num_sms moved to device_info.cuh); the
# decode step in FULL at 1 / 4 / 8 / 16 tokens and 128 / 1,024 positions with the variants in
# turns (fused = the rule, attn_gt8 = the former rule, attn_gt1); then the engine loop, sync
# against async (the headline figures). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 110 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_paged_attention.py tests/kernels/test_cascade_attention.py \
  tests/kernels/test_decode_ops.py > $o/kernel_tests.log 2>&1
echo "kernel tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/kernel_tests.log; grep -E "^FAILED|^ERROR" $o/kernel_tests.log | head -8
ab() {  # name, timeout, models and variants, then -- bench args
  local name=$1 limit=$2; shift 2; t0=$SECONDS
  timeout $limit python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A12 "^decode step, median" $o/$name.log
}
ab ab_128 90 --models Llama-3.2-1B Qwen3-0.6B --variants fused attn_gt8 attn_gt1 -- --modes FULL --batch-sizes 1 4 8 16
ab ab_1024 90 --models Llama-3.2-1B Qwen3-0.6B --variants fused attn_gt8 attn_gt1 -- --modes FULL --batch-sizes 1 4 8 16 --context-len 1024
t0=$SECONDS; timeout 170 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 8 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A12 "^model" $o/async_step.log
cd $OUT && tar czf results.tgz r && rm -rf r

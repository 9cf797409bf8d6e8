#!/usr/bin/env bash
# 2026-12-03 (sixth pass), call 4: the final attention rule (one head a CTA while 8 * num_tokens *
# num_kv_heads <= SMs); greedy argmax with a cluster of CTAs a row (distributed shared
# memory for the row's merge). Builds csrc; the argmax and attention kernel tests on CUDA (1 / 3 /
# 8 CTAs a row and the launcher's choice against torch.argmax) and the sampling GPU tests; the
# per-call argmax benchmark (torch, one CTA a row, the cluster); the decode step at 1 / 2 / 4
# tokens (fused = the rule, attn_gt8, attn_gt1) at 128 and 1,024 positions; the decode step in
# the engine loop, sync against async (the final tree's headline figures). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 110 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_argmax_rows.py tests/kernels/test_paged_attention.py \
  tests/gpu/test_sampling_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
t0=$SECONDS; timeout 60 python3 benchmarks/bench_greedy.py --batches 1 16 64 --out $o/greedy.json > $o/greedy.log 2>&1
echo "greedy bench rc=$? in $((SECONDS-t0)) s"; grep -E "^(model|SmolLM2|Llama|Qwen3)" $o/greedy.log
ab() {  # name, timeout, models and variants, then -- bench args
  local name=$1 limit=$2; shift 2; t0=$SECONDS
  timeout $limit python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A8 "^decode step, median" $o/$name.log
}
ab ab_128 45 --models Llama-3.2-1B Qwen3-0.6B --variants fused attn_gt8 attn_gt1 -- --modes FULL --batch-sizes 1 2 4
ab ab_1024 45 --models Llama-3.2-1B Qwen3-0.6B --variants fused attn_gt8 attn_gt1 -- --modes FULL --batch-sizes 1 2 4 --context-len 1024
t0=$SECONDS; timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 8 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A12 "^model" $o/async_step.log
cd $OUT && tar czf results.tgz r && rm -rf r

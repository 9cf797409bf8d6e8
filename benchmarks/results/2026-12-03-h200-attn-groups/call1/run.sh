#!/usr/bin/env bash
# 2026-12-03 (sixth pass), call 1: query heads per attention CTA. Builds csrc; the attention
# kernel tests on CUDA (the GT cap and the one-partition bound against the reference); the decode
# step in FULL at 128 tokens of context with the variants in turns (fused = the tree's rule, the
# largest GT of 8/4/2/1 dividing the GQA ratio; attn_gt1 / attn_gt2 = at most 1 / 2 heads a CTA;
# attn_split = every context past one partition split), then at 1,024 tokens. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 70 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_paged_attention.py > $o/kernel_tests.log 2>&1
echo "kernel tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/kernel_tests.log; grep -E "^FAILED|^ERROR" $o/kernel_tests.log | head -8
ab() {  # name, timeout, models and variants, then -- bench args
  local name=$1 limit=$2; shift 2; t0=$SECONDS
  timeout $limit python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A12 "^decode step, median" $o/$name.log
}
ab ab_smol 80 --models SmolLM2-135M --variants fused attn_split -- --modes FULL --batch-sizes 1 16
ab ab_gqa 190 --models Llama-3.2-1B Qwen3-0.6B --variants fused attn_gt1 attn_gt2 attn_split -- --modes FULL --batch-sizes 1 16
ab ab_1024 110 --models Llama-3.2-1B Qwen3-0.6B --variants fused attn_gt1 attn_gt2 -- --modes FULL --batch-sizes 1 16 --context-len 1024
cd $OUT && tar czf results.tgz r && rm -rf r

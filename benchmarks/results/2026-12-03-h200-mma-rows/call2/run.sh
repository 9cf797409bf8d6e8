#!/usr/bin/env bash
# 2026-12-03 (ninth pass), mma-rows call 2: the row tiles dropped (the tree of call 1 without
# them). Builds csrc; the decode-op kernel tests; the decode step at 8 and 16 tokens, variants in
# turns: Llama-3.2-1B fused (the table), qkv16 (its QKV fused up to 16 tokens, so attention
# follows a PDL kernel), down16, attn_gt1 / attn_gt2 (1 / 2 query heads a CTA), qkv16_gt2, at 128
# positions of context, and fused / attn_gt2 / qkv16 at 1,024; SmolLM2-135M fused / attn_gt1 at
# 16 tokens. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
ab() {  # name, models, variants, bench args
  local name=$1 models=$2 variants=$3; shift 3; local t0=$SECONDS
  timeout 120 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $models --variants $variants -- --modes FULL "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A8 "^decode step, median" $o/$name.log; grep -E "decode_16 " $o/$name.log | cut -c1-170
}
ab llama128 Llama-3.2-1B "fused qkv16 down16 attn_gt1 attn_gt2 qkv16_gt2" --batch-sizes 8 16
ab llama1024 Llama-3.2-1B "fused attn_gt2 qkv16" --batch-sizes 16 --context-len 1024
ab smol128 SmolLM2-135M "fused attn_gt1" --batch-sizes 16
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (eleventh pass), call 4: the wide GEMV's norm ops feed the mma steps norm_weight * x
# and scale each token's sums by its 1 / rms in the epilogue (sums of squares after the loop), so
# no weight waits for a pass over the activations. Builds csrc; the decode-op tests; the kernel
# benchmark with the wide sweep (Llama-3.2-1B at 1, 8, 16 tokens; Qwen3-0.6B and SmolLM2-135M at
# 16); the decode step in turns, the table against the norm projections on the wide kernel. One
# archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
k() {  # name, configs, tokens
  local t0=$SECONDS
  timeout 100 python3 benchmarks/bench_decode_kernels.py --configs $2 --tokens $3 --no-stacks --wide-sweep --replays 20 --out $o/$1.json > $o/$1.log 2>&1
  echo "$1 rc=$? in $((SECONDS-t0)) s"; grep -A16 "^per call" $o/$1.log | grep -E "qkv|gate_up|lm_head|config"; grep -A16 "^the wide kernel" $o/$1.log | grep -E "qkv|gate_up|lm_head" | cut -c1-300
}
k kernels_llama Llama-3.2-1B "1 4 8 16"
k kernels_other "Qwen3-0.6B SmolLM2-135M" "4 16"
cd $OUT && tar czf results.tgz r; cd - > /dev/null
ab() {  # name, models, variants, bench args
  local name=$1 models=$2 variants=$3; shift 3; local t0=$SECONDS
  timeout 110 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $models --variants $variants -- --modes FULL "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A6 "^decode step, median" $o/$name.log; grep -E "decode_(1|4|16) " $o/$name.log | cut -c1-260
}
ab llama Llama-3.2-1B "fused wide_norm wide_norm_head" --batch-sizes 1 4 16
cd $OUT && tar czf results.tgz r; cd - > /dev/null
ab qwen Qwen3-0.6B "fused wide_norm" --batch-sizes 4 16
cd $OUT && tar czf results.tgz r && rm -rf r

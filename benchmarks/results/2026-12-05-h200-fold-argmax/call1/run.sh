#!/usr/bin/env bash
# 2026-12-05 (twenty-fourth pass), call 1: the input norm folded into the QKV weight
# (VGRAPH_FOLD_QKV_NORM=1; the QKV op's unit_norm: above its GEMV threshold cuBLAS on the raw
# residual, then one kernel that scales by 1 / rms and rotates, where a norm kernel, cuBLAS and a
# rope kernel ran), the LM head's argmax finishing through atomics on its state instead of a
# cluster (VGRAPH_ARGMAX_ATOMIC=1), the wide GEMV's deeper ring (VGRAPH_WIDE_STAGES=11 / 9) and
# its first refill ahead of the activations (VGRAPH_WIDE_EARLY_REFILL=1; twenty-fifth pass).
# Their op tests on the GPU, steps in turns (Llama-3.2-1B at 1
# and 16, with attention's guessed block ids too; SmolLM2-135M and Qwen3-0.6B at 16), the engine
# loop on the tree and with both on, greedy FULL = NONE with the fold on and FULL's engine core
# in its own process; then each GEMV kernel's fixed cost a call against its streaming rate
# (fit.py). About 370 s; timeout 480.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py \
  -k "unit_norm or match_float32_reference or greedy or wide_kernel_splits or wide_switches" > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 90 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="
  python3 $layer $o/$name/latency_*.json; pack
}
# Llama-3.2-1B at 16 tokens: QKV unfused (norm 1.3-1.7 us, cuBLAS 6.4, rope 2.0-2.2 a layer);
# argmax 8.4 us after cuBLAS's head. At one token: argmax 5.3 us after the CTA-per-pair head.
ab llama16 Llama-3.2-1B 16 400 fused qkv_norm_folded env:VGRAPH_ARGMAX_ATOMIC=1 \
  qkv_norm_folded+env:VGRAPH_ARGMAX_ATOMIC=1 qkv_norm_folded+env:VGRAPH_ARGMAX_ATOMIC=1,VGRAPH_ATTN_GUESS_BLOCKS=1 \
  env:VGRAPH_WIDE_STAGES=9 env:VGRAPH_WIDE_EARLY_REFILL=1
ab llama1 Llama-3.2-1B 1 400 fused env:VGRAPH_ARGMAX_ATOMIC=1 env:VGRAPH_WIDE_STAGES=11 \
  env:VGRAPH_WIDE_STAGES=11,VGRAPH_WIDE_TRIGGER_LEFT=10 env:VGRAPH_WIDE_EARLY_REFILL=1 \
  env:VGRAPH_WIDE_STAGES=11,VGRAPH_WIDE_TRIGGER_LEFT=10,VGRAPH_WIDE_EARLY_REFILL=1
ab smol16 SmolLM2-135M 16 400 fused env:VGRAPH_ARGMAX_ATOMIC=1
# Qwen3-0.6B at 16 tokens: QKV unfused above 8 (no rope in the op: q / k norms come first)
ab qwen16 Qwen3-0.6B 16 400 fused qkv_norm_folded
# the engine loop: the tree, then every candidate on (the fold, the atomic argmax, the deeper ring,
# the early refill)
for on in 0 1; do
  stages=$([ $on = 1 ] && echo 11 || echo 8)
  t0=$SECONDS; VGRAPH_FOLD_QKV_NORM=$on VGRAPH_ARGMAX_ATOMIC=$on VGRAPH_WIDE_STAGES=$stages \
    VGRAPH_WIDE_EARLY_REFILL=$on VGRAPH_ENABLE_MULTIPROCESSING=0 \
    timeout 90 python3 benchmarks/bench_async_scheduling.py --models Llama-3.2-1B --batch-sizes 1 16 \
    --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_on$on.json > $o/async_on$on.log 2>&1
  echo "async loop, candidates $on, rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/async_on$on.log; pack
done
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py -k folded > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8; pack
# The GEMV kernels' fixed cost a call and streaming rate (gate/up-like and down-like shapes)
t0=$SECONDS; timeout 120 python3 $d/fit.py $o/fit.json > $o/fit.log 2>&1
echo "fit rc=$? in $((SECONDS-t0)) s"; cat $o/fit.log | tail -12; pack
cd $OUT && tar czf results.tgz r && rm -rf r

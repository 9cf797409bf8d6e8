#!/usr/bin/env bash
# 2026-12-05 (thirtieth pass), call 1: the one-kernel MLP at one token (rms_norm_mlp_residual,
# csrc/decode_mlp.cu; the table's default for Llama-3.2-1B). Its op tests and greedy FULL = NONE
# on Llama-3.2-1B at 1 and 5 requests; Llama-3.2-1B's batch-1 step in turns against the two
# fused ops (VGRAPH_FUSED_MLP_TOKENS=0) and with the kernel's ring at 4 / 6 rows and the trigger
# after the rows, with each layer's kernel times; Qwen3-0.6B's batch 1 with and without it; the
# engine loop (async, FULL) with and without it; then run_gpu.sh's async and serve steps on the
# tree (the targets). About 350 s; timeout 590.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_mlp_op.py \
  tests/gpu/test_fused_decode_gpu.py -k "cuda or (on_the_fused_path and Llama-3.2-1B and (-1] or -5]))" \
  > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 90 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="
  python3 $layer $o/$name/latency_*.json; pack
}
ab llama1 Llama-3.2-1B 1 400 env:VGRAPH_FUSED_MLP_TOKENS=0 fused env:VGRAPH_MLP_STAGES=4 \
  env:VGRAPH_MLP_STAGES=6 env:VGRAPH_MLP_TRIGGER_LEFT=0
ab qwen1 Qwen3-0.6B 1 300 fused env:VGRAPH_FUSED_MLP_TOKENS=1
for tokens in 0 1; do
  t0=$SECONDS; VGRAPH_FUSED_MLP_TOKENS=$tokens VGRAPH_ENABLE_MULTIPROCESSING=0 \
    timeout 60 python3 benchmarks/bench_async_scheduling.py --models Llama-3.2-1B --batch-sizes 1 16 \
    --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_mlp$tokens.json > $o/async_mlp$tokens.log 2>&1
  echo "async loop, VGRAPH_FUSED_MLP_TOKENS=$tokens, rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/async_mlp$tokens.log; pack
done
STEPS="async serve" SERVE_MODELS="SmolLM2-135M Llama-3.2-1B" bash benchmarks/run_gpu.sh $o
cd $OUT && tar czf results.tgz r && rm -rf r

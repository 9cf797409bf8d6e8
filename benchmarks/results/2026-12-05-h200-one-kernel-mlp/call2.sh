#!/usr/bin/env bash
# 2026-12-05 (thirtieth pass), call 2: the one-kernel MLP's barrier form (VGRAPH_MLP_SUM=barrier,
# now the default: the down projection row-major, each CTA its own output rows after a
# grid-wide barrier, no atomics), after call 1 found the atomic form (fixed-point sums, 270k
# 64-bit atomics a call) 5.5 us a layer slower than the two fused ops on an H100. Its op tests
# and greedy FULL = NONE on Llama-3.2-1B at 1 and 5 requests; Llama-3.2-1B's batch-1 step in
# turns: the two ops, the barrier form at 5 and 6 stages and with the trigger after the stages,
# and two probes whose results are wrong (VGRAPH_MLP_PROBE=1: the barrier form without its
# barrier, the atomic form without its atomics: what the cross-CTA step costs); Qwen3-0.6B's
# batch 1; the engine loop (async, FULL) with and without it. About 300 s; timeout 590.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_mlp_op.py \
  tests/gpu/test_fused_decode_gpu.py -k "cuda or (on_the_fused_path and Llama-3.2-1B and (-1] or -5]))" \
  > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="
  python3 $layer $o/$name/latency_*.json; pack
}
ab llama1 Llama-3.2-1B 1 400 env:VGRAPH_FUSED_MLP_TOKENS=0 fused env:VGRAPH_MLP_STAGES=6 \
  env:VGRAPH_MLP_TRIGGER_LEFT=0 env:VGRAPH_MLP_PROBE=1 env:VGRAPH_MLP_SUM=atomic,VGRAPH_MLP_PROBE=1
ab qwen1 Qwen3-0.6B 1 300 fused env:VGRAPH_FUSED_MLP_TOKENS=1
for tokens in 0 1; do
  t0=$SECONDS; VGRAPH_FUSED_MLP_TOKENS=$tokens VGRAPH_ENABLE_MULTIPROCESSING=0 \
    timeout 60 python3 benchmarks/bench_async_scheduling.py --models Llama-3.2-1B --batch-sizes 1 16 \
    --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_mlp$tokens.json > $o/async_mlp$tokens.log 2>&1
  echo "async loop, VGRAPH_FUSED_MLP_TOKENS=$tokens, rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/async_mlp$tokens.log; pack
done
cd $OUT && tar czf results.tgz r && rm -rf r

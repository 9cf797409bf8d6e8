#!/usr/bin/env bash
# 2026-12-05 (twentieth pass), call 2: a follow-up to call 1, prepared before call 1 ran, for the
# same session's remaining device time. Which ops the staged activations help: every op's switch
# turned off alone (VGRAPH_GEMV_GATHER_<OP>=0, `env:` variants), against the tree and all off, at
# the four target shapes, step in turns with per-layer kernel tables; then the engine loop, tree
# against all off, three times each with 8 rounds. Last, a probe (probe.patch, Python only): with
# VGRAPH_PROBE_NO_FEED=1 the async engine's FULL graphs record their input copy and its FULL steps
# skip the token feed, so no copy or feed kernel runs outside the graph: the tokens are wrong
# ("tokens equal" False), the time is the bound on moving both into the graph; twice each, the
# first profiling 20 steps. No tests: call 1 ran them on the same tree.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
git log -1 --format=%H >> $o/env.txt 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 120 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="; grep -E "decode_$b " $o/$name.log | cut -c1-150
  python3 $layer $o/$name/latency_*.json; pack
}
off() { for op in "$@"; do printf 'env:VGRAPH_GEMV_GATHER_%s=0 ' $op; done; }
# the ops each shape runs fused: at 16 tokens Llama-3.2-1B's QKV, down and LM head are unfused
ab smol16 SmolLM2-135M 16 300 fused gather_off $(off QKV RESIDUAL GATE_UP)
ab llama16 Llama-3.2-1B 16 300 fused gather_off $(off RESIDUAL)
ab smol1 SmolLM2-135M 1 500 fused gather_off $(off QKV RESIDUAL GATE_UP NORM_OUT)
ab llama1 Llama-3.2-1B 1 500 fused gather_off $(off QKV RESIDUAL NORM_OUT)
for i in 1 2 3; do
  for v in tree nogather; do
    gather=1; [ $v = nogather ] && gather=0
    t0=$SECONDS; VGRAPH_GEMV_GATHER=$gather VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py \
      --models SmolLM2-135M Llama-3.2-1B --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 8 --out $o/async_$v$i.json > $o/async_$v$i.log 2>&1
    echo "async $v rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/async_$v$i.log; pack
  done
done
{ git apply $d/probe.patch 2>/dev/null || patch -p1 < $d/probe.patch; } || echo "probe.patch did not apply"
for i in 1 2; do
  for p in 0 1; do
    flag=""; [ $i = 1 ] && flag="--profile-steps 20"
    t0=$SECONDS; VGRAPH_PROBE_NO_FEED=$p VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py \
      --models SmolLM2-135M Llama-3.2-1B --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 $flag --out $o/probe${p}_$i.json > $o/probe${p}_$i.log 2>&1
    echo "probe no_feed=$p rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/probe${p}_$i.log; grep "^profiled" $o/probe${p}_$i.log | cut -c1-220; pack
  done
done
cd $OUT && tar czf results.tgz r && rm -rf r

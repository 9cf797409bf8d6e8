#!/usr/bin/env bash
# 2026-12-05 (twenty-second pass), call 1. The wide kernel letting the next kernel start once each
# warp has n weight chunks left (VGRAPH_WIDE_TRIGGER_LEFT; the tree: 0, after its loop), and
# Llama-3.2-1B's QKV fused at 16 tokens on the tensor-core kernel (staged activations since the
# gather records) or the wide one, against the unfused norm + cuBLAS + rope. In order: the wide
# kernel's op tests; Llama-3.2-1B's step in turns at batch 1 and 16; the engine loop with the
# candidates set; SmolLM2-135M's leftovers of the graph-feed call (warp per chunk at 8 tokens,
# the residual ops' staged loads at 16).
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py -k "wide" > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 150 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="
  python3 $layer $o/$name/latency_*.json; pack
}
QKV16_MMA=env:VGRAPH_GEMV_MAX_TOKENS_QKV=16,VGRAPH_GEMV_WIDE_FROM_QKV=17
ab llama1 Llama-3.2-1B 1 400 fused env:VGRAPH_WIDE_TRIGGER_LEFT=3 env:VGRAPH_WIDE_TRIGGER_LEFT=7 env:VGRAPH_WIDE_SPLIT=2
ab llama16 Llama-3.2-1B 16 400 fused env:VGRAPH_WIDE_TRIGGER_LEFT=7 $QKV16_MMA
loop() {  # name env...
  local name=$1; shift
  t0=$SECONDS; env "$@" VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py \
    --models Llama-3.2-1B --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/$name.json > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/$name.log; pack
}
for i in 1; do
  loop loop_tree_$i VGRAPH_NOTHING=1
  loop loop_left7_$i VGRAPH_WIDE_TRIGGER_LEFT=7
  loop loop_qkv16mma_$i VGRAPH_GEMV_MAX_TOKENS_QKV=16 VGRAPH_GEMV_WIDE_FROM_QKV=17
done
ab smol8 SmolLM2-135M 8 300 fused env:VGRAPH_MMA_WARP_PER_CHUNK_QKV=0,VGRAPH_MMA_WARP_PER_CHUNK_RESIDUAL=0
ab smol16 SmolLM2-135M 16 500 fused env:VGRAPH_GEMV_GATHER_RESIDUAL=0
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-05 (twenty-eighth pass), call 5: the packed weights by default (VGRAPH_WIDE_PACK=auto:
# those the wide kernel runs, wide_gemv_from): its op test and greedy FULL = NONE; where the wide
# GEMV lets the down projection start on them (VGRAPH_WIDE_TRIGGER_LEFT: the table's 7 chunks
# left was set on the row-major weight, whose loop's tail streams slower): Llama-3.2-1B's step in
# turns at one token (row-major, packed, packed with the trigger after the loop or at 3 chunks
# left, packed with the deeper ring), and the engine loop at 1 and 16 with the trigger
# after the loop and with the table's. About 200 s; timeout 300.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 80 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="
  python3 $layer $o/$name/latency_*.json; pack
}
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/gpu/test_fused_decode_gpu.py \
  -k "wide_gemv_from or (wide_packed_weights and Llama-3.2-1B-5)" > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8; pack
ab llama1 Llama-3.2-1B 1 400 env:VGRAPH_WIDE_PACK=0 fused env:VGRAPH_WIDE_TRIGGER_LEFT=0 \
  env:VGRAPH_WIDE_TRIGGER_LEFT=3 env:VGRAPH_WIDE_STAGES=11,VGRAPH_WIDE_TRIGGER_LEFT=10
for left in 0 7; do
  t0=$SECONDS; VGRAPH_WIDE_TRIGGER_LEFT=$left VGRAPH_ENABLE_MULTIPROCESSING=0 \
    timeout 60 python3 benchmarks/bench_async_scheduling.py --models Llama-3.2-1B --batch-sizes 1 16 \
    --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_left$left.json > $o/async_left$left.log 2>&1
  echo "async loop, packed, trigger left $left, rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/async_left$left.log; pack
done
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-05 (twenty-ninth pass), call 1: Llama-3.2-1B's batch-1 step with its O / down (RESIDUAL)
# and QKV projections on the tensor-core GEMV at one token (VGRAPH_GEMV_MMA_FROM_<OP>=1; the table
# has them on the CUDA-core kernel there), and attention guessing its block ids: the step in turns
# (400 steps a variant) with the kernels of a layer; then the engine loop (bench_async_scheduling,
# FULL, capture sizes 1-16, 5 rounds: the issue's figure) at 1 and 16 for the tree and for the
# variant with the least GPU busy time if it beats the tree's by 4 us, and greedy FULL = NONE
# with it. About 220 s; timeout 330.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 90 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab \
  --models Llama-3.2-1B --variants fused env:VGRAPH_GEMV_MMA_FROM_RESIDUAL=1 env:VGRAPH_GEMV_MMA_FROM_QKV=1 \
  env:VGRAPH_GEMV_MMA_FROM_QKV=1,VGRAPH_GEMV_MMA_FROM_RESIDUAL=1 env:VGRAPH_ATTN_GUESS_BLOCKS=1 \
  -- --modes FULL --num-iters 400 --batch-sizes 1 > $o/ab.log 2>&1
echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/ab.log | grep "B="
python3 $layer $o/ab/latency_*.json; pack
best=$(python3 - $o/ab/latency_Llama-3.2-1B.json <<'PY'
import json, sys
busy = {}
for r in json.load(open(sys.argv[1]))["results"]:
    busy[r["variant"]] = r["kernels"]["decode_1"]["busy_us_per_step"]
top = min(busy, key=busy.get)
print(top[4:].replace(",", " ") if top != "fused" and busy[top] < busy["fused"] - 4 else "")
PY
)
echo "winner by busy time: ${best:-none}"
loop() {  # tag, then the variant's VAR=value words
  local tag=$1; shift; t0=$SECONDS
  env "$@" VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py \
    --models Llama-3.2-1B --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 \
    --out $o/async_$tag.json > $o/async_$tag.log 2>&1
  echo "async loop, $tag $*, rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/async_$tag.log; pack
}
loop tree
[ -n "$best" ] && loop variant $best
if [ -n "$best" ]; then
  t0=$SECONDS; env $best timeout 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py \
    -k "Llama-3.2-1B-5" > $o/tests.log 2>&1
  echo "tests ($best) rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
fi
cd $OUT && tar czf results.tgz r && rm -rf r

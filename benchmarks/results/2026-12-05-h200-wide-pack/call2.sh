#!/usr/bin/env bash
# 2026-12-05 (twenty-eighth pass), call 2: the layout probe (probe_layout.py); the wide GEMV on
# weights packed tile by tile (VGRAPH_WIDE_PACK=1): its op tests, steps in turns (Llama-3.2-1B at
# 1 and 16 tokens), the engine loop with and without it (Llama-3.2-1B at 1 / 16, async, FULL),
# greedy FULL = NONE with it and FULL's engine core in its own process. About 450 s; timeout 590.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
git log -1 --format=%H >> $o/env.txt 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1 &
b=$!
t1=$SECONDS; timeout 150 python3 $d/probe_layout.py $o/probe_layout.json > $o/probe_layout.log 2>&1
echo "probe rc=$? in $((SECONDS-t1)) s"; grep -v -i warn $o/probe_layout.log | tail -8; pack
wait $b; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py \
  -k "packed" > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 90 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="
  python3 $layer $o/$name/latency_*.json; pack
}
ab llama1 Llama-3.2-1B 1 400 fused env:VGRAPH_WIDE_PACK=1
ab llama16 Llama-3.2-1B 16 400 fused env:VGRAPH_WIDE_PACK=1

for on in 0 1; do
  t0=$SECONDS; VGRAPH_WIDE_PACK=$on VGRAPH_ENABLE_MULTIPROCESSING=0 \
    timeout 100 python3 benchmarks/bench_async_scheduling.py --models Llama-3.2-1B --batch-sizes 1 16 \
    --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_pack$on.json > $o/async_pack$on.log 2>&1
  echo "async loop, pack $on, rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/async_pack$on.log; pack
done
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py -k "wide_packed and Llama" > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8; pack
cd $OUT && tar czf results.tgz r && rm -rf r

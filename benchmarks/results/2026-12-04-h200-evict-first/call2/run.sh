#!/usr/bin/env bash
# 2026-12-04, call 2: the GEMVs' weight loads with an L2 evict-first policy
# (VGRAPH_GEMV_L2_EVICT_FIRST=1; attention back on its earlier copies, call 1's patch undone), and
# the O / down projections on the wide kernel (one token, 16 tokens; 4 tiles a CTA). The op tests
# of the switch; the decode step in turns; the engine loop with the switch off and on.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py \
  -k "switches or norm_scaled or wide_kernel_splits" > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="; grep -E "decode_$b " $o/$name.log | cut -c1-150
  python3 $d/../call1/layer.py $o/$name/latency_*.json; pack
}
ab llama1 Llama-3.2-1B 1 500 fused l2_evict_first wide_residual1 wide_residual1_w4 wide_w4
ab smol1 SmolLM2-135M 1 500 fused l2_evict_first
ab llama16 Llama-3.2-1B 16 300 fused l2_evict_first wide_residual16 wide_residual16_w4
ab smol16 SmolLM2-135M 16 300 fused l2_evict_first
for v in 0 1; do
  t0=$SECONDS; VGRAPH_GEMV_L2_EVICT_FIRST=$v VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
    --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_l2ef$v.json > $o/async_l2ef$v.log 2>&1
  echo "async l2_evict_first=$v rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/async_l2ef$v.log; pack
done
cd $OUT && tar czf results.tgz r && rm -rf r

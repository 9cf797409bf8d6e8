#!/usr/bin/env bash
# 2026-12-04, call 1: the norm ops' scaled sums (VGRAPH_GEMV_NORM_SCALED) and GEMVs over a size
# launched without PDL (VGRAPH_PDL_MAX_MIB). Builds csrc; the op tests of both switches; the
# decode step in turns (per-kernel sequence in the JSON): SmolLM2-135M at batch 1 and 16 (also
# small3 / no_loop: the gate/up's one-token grid since the packing), Llama-3.2-1B at batch 1 and
# 16; the engine loop with the switch off and on.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log
t0=$SECONDS; timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py -k "norm_scaled or switches or chain or path_matches" > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR|Error" $o/tests_ops.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 150 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="; grep -E "decode_$b " $o/$name.log | cut -c1-190; pack
}
ab smol1 SmolLM2-135M 1 500 fused norm_scaled small3 no_loop
ab smol16 SmolLM2-135M 16 300 fused norm_scaled
ab llama1 Llama-3.2-1B 1 300 fused norm_scaled pdl_max4 pdl_max16 pdl_max48
ab llama16 Llama-3.2-1B 16 300 fused norm_scaled pdl_max4 pdl_max16
for v in 0 1; do
  t0=$SECONDS; VGRAPH_GEMV_NORM_SCALED=$v VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
    --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_scaled$v.json > $o/async_scaled$v.log 2>&1
  echo "async scaled=$v rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/async_scaled$v.log; pack
done
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (eleventh pass), call 5: why the wide GEMV's per-call wins turn into a slower decode
# step (call 4). The launch rule from call 4's sweep (S for 3.5 warp tiles an SM, W = 8); the
# decode step in turns: the table, the norm projections on the wide kernel, each one alone, with 4
# tiles a CTA, and with the next kernel started only after the wide kernel's loop
# (VGRAPH_WIDE_LATE_TRIGGER=1). Builds csrc; the wide kernel's op tests. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py -k "wide or chain" > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_kernels.py --configs Llama-3.2-1B Qwen3-0.6B --tokens 4 16 --no-stacks --replays 20 --out $o/kernels.json > $o/kernels.log 2>&1
echo "kernels rc=$? in $((SECONDS-t0)) s"; grep -A24 "^per call" $o/kernels.log | grep -E "qkv|gate_up|config"
cd $OUT && tar czf results.tgz r; cd - > /dev/null
ab() {  # name, models, variants, bench args
  local name=$1 models=$2 variants=$3; shift 3; local t0=$SECONDS
  timeout "$T" python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $models --variants $variants -- --modes FULL "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A8 "^decode step, median" $o/$name.log; grep -E "decode_(4|16) " $o/$name.log | cut -c1-200
}
T=220 ab llama Llama-3.2-1B "fused wide_norm wide_gate_up wide_qkv wide_norm_w4 wide_norm_late" --batch-sizes 4 16
cd $OUT && tar czf results.tgz r; cd - > /dev/null
T=140 ab qwen Qwen3-0.6B "fused wide_norm wide_gate_up wide_norm_late" --batch-sizes 16
cd $OUT && tar czf results.tgz r && rm -rf r

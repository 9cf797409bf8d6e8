#!/usr/bin/env bash
# 2026-12-04, call 6: where the wide GEMV wins in the decode step. Call 5 had Llama-3.2-1B's
# gate/up on it 47 us faster at 16 tokens and 60 slower at 4, and the late trigger
# (VGRAPH_WIDE_LATE_TRIGGER=1) faster with both norm projections on it. Here: the step at 2-16
# tokens with gate/up or QKV on the wide kernel, with and without the late trigger, 300 steps a
# variant; Qwen3-0.6B likewise at 4-16; the per-call kernels at the token counts between. One
# archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_kernels.py --configs Llama-3.2-1B Qwen3-0.6B --tokens 2 8 12 --no-stacks --replays 20 --out $o/kernels.json > $o/kernels.log 2>&1
echo "kernels rc=$? in $((SECONDS-t0)) s"; grep -A24 "^per call" $o/kernels.log | grep -E "qkv|gate_up|config"
cd $OUT && tar czf results.tgz r; cd - > /dev/null
ab() {  # name, models, variants, bench args
  local name=$1 models=$2 variants=$3; shift 3; local t0=$SECONDS
  timeout "$T" python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $models --variants $variants -- --modes FULL --num-iters 300 "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A8 "^decode step, median" $o/$name.log; grep -E "decode_(4|16) " $o/$name.log | cut -c1-200
}
T=200 ab llama Llama-3.2-1B "fused wide_gate_up wide_gate_up_late wide_qkv_late wide_norm_late" --batch-sizes 2 4 8 12 16
cd $OUT && tar czf results.tgz r; cd - > /dev/null
T=150 ab qwen Qwen3-0.6B "fused wide_gate_up_late wide_qkv_late wide_norm_late" --batch-sizes 4 8 16
cd $OUT && tar czf results.tgz r && rm -rf r

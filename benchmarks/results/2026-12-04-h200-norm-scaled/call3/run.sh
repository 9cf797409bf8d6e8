#!/usr/bin/env bash
# 2026-12-04, call 3: the greedy argmax's row cut over 4 / 8 CTAs (SmolLM2-135M's 49,152 entries
# take 3 by the rule) at batch 1 and 16, and Llama-3.2-1B's one-token QKV without the looping
# grid (no_loop), each in turns with more steps.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 150 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="; grep -E "decode_$b " $o/$name.log | cut -c1-190; pack
}
ab smol1 SmolLM2-135M 1 800 fused argmax4 argmax8
ab smol16 SmolLM2-135M 16 500 fused argmax4 argmax8
ab llama1 Llama-3.2-1B 1 600 fused no_loop
cd $OUT && tar czf results.tgz r && rm -rf r

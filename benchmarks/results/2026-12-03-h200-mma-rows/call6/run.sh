#!/usr/bin/env bash
# 2026-12-03 (ninth pass), call 6, the final tree: the token split above 16 tokens, decode step in
# turns, fused (the rule) / split_off: SmolLM2-135M at 24 and 32 tokens, Qwen3-0.6B at 32. One
# archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
ab() {  # name, models, variants, bench args
  local name=$1 models=$2 variants=$3; shift 3; local t0=$SECONDS
  timeout 60 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $models --variants $variants -- --modes FULL "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A4 "^decode step, median" $o/$name.log; grep -E "decode_32 " $o/$name.log | cut -c1-170
}
ab smol SmolLM2-135M "fused split_off" --batch-sizes 24 32
ab qwen Qwen3-0.6B "fused split_off" --batch-sizes 32
cd $OUT && tar czf results.tgz r && rm -rf r

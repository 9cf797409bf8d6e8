#!/usr/bin/env bash
# 2026-12-04, call 7: call 4's step variants, which its time limit cut off: the one-token CUDA-core
# GEMV with 2 / 4 row pairs a CTA (the 4-warp CTAs of cta_probe.cu's fastest chains) in the batch-1
# decode step, timed in turns against the table's shapes.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/smol --models SmolLM2-135M \
  --variants fused pairs2 pairs4 pairs4_small1 -- --modes FULL --num-iters 500 --batch-sizes 1 > $o/smol.log 2>&1
echo "smol A/B rc=$? in $((SECONDS-t0)) s"; grep -A5 "^decode step, median" $o/smol.log; grep -E "decode_1 " $o/smol.log | cut -c1-200
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/llama --models Llama-3.2-1B \
  --variants fused pairs2 -- --modes FULL --num-iters 300 --batch-sizes 1 > $o/llama.log 2>&1
echo "llama A/B rc=$? in $((SECONDS-t0)) s"; grep -A3 "^decode step, median" $o/llama.log; grep -E "decode_1 " $o/llama.log | cut -c1-200
cd $OUT && tar czf results.tgz r && rm -rf r

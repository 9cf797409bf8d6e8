#!/usr/bin/env bash
# 2026-12-04, call 4: the kernel boundary against the CTA count at equal bytes (cta_probe.cu);
# then the one-token CUDA-core GEMV with 2 / 4 row pairs a CTA (fewer, fuller CTAs) in the
# batch-1 decode step of SmolLM2-135M and Llama-3.2-1B, timed in turns against the table's shapes.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
d=benchmarks/results/2026-12-04-h200-arrival/call4
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
(t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s") &
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 $d/cta_probe.cu -o /tmp/cta_probe && timeout 120 /tmp/cta_probe $o/cta_probe.json
wait
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 150 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/smol --models SmolLM2-135M \
  --variants fused pairs2 pairs4 pairs4_small1 -- --modes FULL --num-iters 500 --batch-sizes 1 > $o/smol.log 2>&1
echo "smol A/B rc=$? in $((SECONDS-t0)) s"; grep -A6 "^decode step, median" $o/smol.log; grep -E "decode_1 " $o/smol.log | cut -c1-220
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/llama --models Llama-3.2-1B \
  --variants fused pairs2 -- --modes FULL --num-iters 300 --batch-sizes 1 > $o/llama.log 2>&1
echo "llama A/B rc=$? in $((SECONDS-t0)) s"; grep -A3 "^decode step, median" $o/llama.log; grep -E "decode_1 " $o/llama.log | cut -c1-220
cd $OUT && tar czf results.tgz r && rm -rf r

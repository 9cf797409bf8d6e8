#!/usr/bin/env bash
# 2026-12-04, call 1: what a kernel boundary costs in a CUDA graph (chain_probe.cu: plain, PDL,
# an arrival counter instead of griddepcontrol.wait); then the csrc build, the engine loop's
# decode step for the three shipped configs, and `vgraph serve Qwen3-0.6B` (engine core in its
# own process, default mode and capture list) under `vgraph bench serve` at concurrency 1 and 16.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
d=benchmarks/results/2026-12-04-h200-arrival/call1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 $d/chain_probe.cu -o /tmp/chain_probe && timeout 60 /tmp/chain_probe $o/chain_probe.json
(t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s") 
t0=$SECONDS; timeout 100 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B Qwen3-0.6B \
  --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A7 "^model" $o/async_step.log
t0=$SECONDS; SERVE_MODELS="Qwen3-0.6B" SERVE_CONCURRENCY="1 16" STEPS="serve" timeout 200 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve rc=$? in $((SECONDS-t0)) s"
for f in $o/serve/serve_*.json; do python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[1].rsplit('/', 1)[1]:34s} c={d['max_concurrency']:<3} ok={d['completed']}/{d['num_prompts']} "
      f"TTFT med {d['median_ttft_ms']:.2f} p99 {d['p99_ttft_ms']:.2f}  TPOT med {d['median_tpot_ms']:.3f} "
      f"p99 {d['p99_tpot_ms']:.3f}  ITL med {d['median_itl_ms']:.3f} mean {d['mean_itl_ms']:.3f}  "
      f"out tok/s {d['output_throughput']:.0f}")
PY
done
cd $OUT && tar czf results.tgz r && rm -rf r

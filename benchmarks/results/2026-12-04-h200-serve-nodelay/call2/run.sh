#!/usr/bin/env bash
# 2026-12-04, call 2: serving with the per-request OutputCollector (a delta output that finds
# the previous one not yet taken is merged into it) against the per-request asyncio.Queue it
# replaced (collector.patch reversed), same run. The engine loop's decode step first (the
# reference), then `vgraph serve` (engine core in its own process, dummy weights, default mode
# and capture list) under `vgraph bench serve` at concurrency 1, 16 and 64.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
d=benchmarks/results/2026-12-04-h200-serve-nodelay/call2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 90 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 16 64 --capture-sizes 1 2 4 8 16 32 64 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A7 "^model" $o/async_step.log
t0=$SECONDS; SERVE_MODELS="SmolLM2-135M Llama-3.2-1B" SERVE_CONCURRENCY="1 16 64" STEPS="serve" timeout 270 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve rc=$? in $((SECONDS-t0)) s"
patch -R -p1 < $d/collector.patch && grep -c "asyncio.Queue" vgraph/engine/async_llm.py
t0=$SECONDS; SERVE_TAG=_queue SERVE_CONCURRENCY="1 16 64" STEPS="serve" timeout 120 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve (queue) rc=$? in $((SECONDS-t0)) s"
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

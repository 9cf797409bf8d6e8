#!/usr/bin/env bash
# 2026-12-04, call 5: the final tree on another machine: the engine loop (SmolLM2-135M and
# Llama-3.2-1B; Qwen3-0.6B at 128 positions); Llama-3.2-1B's batch-1 step in turns with the wide
# kernel letting the next kernel in at once (wide_early: measured at 2-16 tokens only before);
# serving SmolLM2-135M at concurrency 1.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/async_step.log; pack
t0=$SECONDS; SERVE_MODELS="SmolLM2-135M" SERVE_CONCURRENCY="1" STEPS="serve" timeout 100 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve rc=$? in $((SECONDS-t0)) s"
for f in $o/serve/serve_*.json; do python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[1].rsplit('/', 1)[1]:26s} c={d['max_concurrency']:<3} ok={d['completed']}/{d['num_prompts']} "
      f"TTFT med {d['median_ttft_ms']:.2f} p99 {d['p99_ttft_ms']:.2f}  TPOT med {d['median_tpot_ms']:.3f} "
      f"p99 {d['p99_tpot_ms']:.3f}  ITL med {d['median_itl_ms']:.3f} mean {d['mean_itl_ms']:.3f}")
PY
done; pack
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/llama1 --models Llama-3.2-1B \
  --variants fused wide_early -- --modes FULL --num-iters 500 --batch-sizes 1 > $o/llama1.log 2>&1
echo "llama1 rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/llama1.log | grep "B="; grep -E "decode_1 " $o/llama1.log | cut -c1-150
python3 $d/../call1/layer.py $o/llama1/latency_*.json; pack
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 45 python3 benchmarks/bench_async_scheduling.py --models Qwen3-0.6B \
  --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_qwen.json > $o/async_qwen.log 2>&1
echo "async Qwen3-0.6B rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/async_qwen.log
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-04, call 5: the final tree (scaled norm sums, Llama-3.2-1B's QKV without the looping
# grid). The decode-op, decode-model and engine GPU tests (transformers parity on tiny models,
# FULL = NONE); greedy NONE = FULL on the three configs; the engine loop of the three configs (Qwen3-0.6B also at
# 256 positions of context, where its served requests run); `vgraph serve SmolLM2-135M` (engine
# core in its own process, default mode and capture list) at concurrency 1.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
t0=$SECONDS; timeout 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8; pack
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
for c in 128 256; do
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py --models Qwen3-0.6B --context-len $c \
    --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_qwen_ctx$c.json > $o/async_qwen_ctx$c.log 2>&1
  echo "async Qwen3-0.6B ctx $c rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/async_qwen_ctx$c.log; pack
done
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_engine_gpu.py > $o/tests_engine.log 2>&1
echo "engine tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_engine.log; grep -E "^FAILED|^ERROR" $o/tests_engine.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

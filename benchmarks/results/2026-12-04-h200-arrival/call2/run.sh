#!/usr/bin/env bash
# 2026-12-04, call 2: linear_add_rms_norm_gate_up_silu's one kernel (clusters that each compute the
# whole O projection) for SmolLM2-135M at one token. Builds csrc; the op tests, the paged-attention
# tests (their arrival counters moved to arrival_counters.cuh) and greedy NONE = FULL on the three
# configs; the decode step in turns against the two kernels (ogu_off) and other cluster counts;
# the engine loop; `vgraph serve SmolLM2-135M` (engine core in its own process) at concurrency 1, 16.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; grep -i -m5 "error" $o/build.log
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/smol --models SmolLM2-135M \
  --variants fused ogu_off ogu_c4 ogu_c16 -- --modes FULL --num-iters 300 --batch-sizes 1 16 > $o/smol.log 2>&1
echo "smol A/B rc=$? in $((SECONDS-t0)) s"; grep -A6 "^decode step, median" $o/smol.log; grep -E "decode_1 " $o/smol.log | cut -c1-200
cd $OUT && tar czf results.tgz r; cd - > /dev/null
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/async_step.log
t0=$SECONDS; SERVE_MODELS="SmolLM2-135M" SERVE_CONCURRENCY="1 16" STEPS="serve" timeout 150 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
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
t0=$SECONDS; timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_paged_attention.py -x > $o/tests_attn.log 2>&1
echo "attention tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_attn.log; grep -E "^FAILED|^ERROR" $o/tests_attn.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

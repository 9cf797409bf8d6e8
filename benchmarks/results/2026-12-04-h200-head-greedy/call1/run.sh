#!/usr/bin/env bash
# 2026-12-04 (seventeenth pass), call 1: the LM head ops' greedy tokens (the CUDA-core GEMV's
# epilogue at one token, the widening argmax after cuBLAS at 16) against the sampler's argmax after
# the graph (greedy_apart), step in turns and the engine loop; GPU tests (ops, argmax, decode model,
# greedy FULL = NONE with the engine core in its own process, piecewise, engine); serving.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
git log -1 --format=%H >> $o/env.txt 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py \
  tests/kernels/test_argmax_rows.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="; grep -E "decode_$b " $o/$name.log | cut -c1-150
  python3 $d/layer.py $o/$name/latency_*.json; pack
}
ab llama1 Llama-3.2-1B 1 500 fused greedy_apart
ab smol1 SmolLM2-135M 1 500 fused greedy_apart
ab llama16 Llama-3.2-1B 16 300 fused greedy_apart
ab smol16 SmolLM2-135M 16 300 fused greedy_apart
i=0
for v in head apart head apart; do  # the engine loop, greedy tokens from the head / the sampler
  i=$((i+1)); flag=""; [ $v = apart ] && flag="--greedy-apart"
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
    --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 $flag --out $o/async_$v$i.json > $o/async_$v$i.log 2>&1
  echo "async $v rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/async_$v$i.log; pack
done
t0=$SECONDS; timeout 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8; pack
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
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_engine_gpu.py > $o/tests_engine.log 2>&1
echo "engine tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_engine.log; grep -E "^FAILED|^ERROR" $o/tests_engine.log | head -8; pack
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_piecewise_gpu.py -k replayed_pieces > $o/tests_pw.log 2>&1
echo "piecewise tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_pw.log; grep -E "^FAILED|^ERROR" $o/tests_pw.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-05 (twenty-first pass), call 1, prepared and not run (no device machine could be
# started for it). It applies graph_feed.patch first: the token feed recorded in FULL graphs
# (the input copy, an external event, the gather from the feed slots), against
# VGRAPH_FEED_IN_GRAPH=0 (both on the stream before the graph). Then: async = sync on FULL graphs
# (three architectures, the feed in and out of the graphs) and with the default model in its own
# process; the engine loop in turns, twice each with 5 rounds, the first of each profiling 20
# steps; greedy FULL = NONE with FULL's engine core in its own process; the warp-per-chunk rule's
# op test; serving at concurrency 1. In that order (the most needed first): about 270 s; then
# three step-in-turns comparisons (below), about 60 s more.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
git log -1 --format=%H >> $o/env.txt 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
{ git apply $d/../graph_feed.patch 2>/dev/null || patch -p1 < $d/../graph_feed.patch; } || { echo "graph_feed.patch did not apply"; exit 1; }
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_async_scheduling_gpu.py > $o/tests_async.log 2>&1
echo "async tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_async.log; grep -E "^FAILED|^ERROR" $o/tests_async.log | head -8; pack
for i in 1 2; do
  for f in 1 0; do
    flag=""; [ $i = 1 ] && flag="--profile-steps 20"
    t0=$SECONDS; VGRAPH_FEED_IN_GRAPH=$f VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py \
      --models SmolLM2-135M Llama-3.2-1B --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 $flag --out $o/async_feed${f}_$i.json > $o/async_feed${f}_$i.log 2>&1
    echo "async feed_in_graph=$f rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/async_feed${f}_$i.log; grep "^profiled.*async" $o/async_feed${f}_$i.log | cut -c1-240; pack
  done
done
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8; pack
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py -k "warp_per_chunk or gathered" \
  > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
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
# then, step in turns: the warp-per-chunk rule (the tree) against both off at SmolLM2-135M's 4
# and 8 tokens; at its 16 the O / down ops' staged loads off (one run in the gather records' call
# 2 had them 8 us of busy time slower)
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="; grep -E "decode_$b " $o/$name.log | cut -c1-150
  python3 $layer $o/$name/latency_*.json; pack
}
ab smol4 SmolLM2-135M 4 300 fused env:VGRAPH_MMA_WARP_PER_CHUNK_QKV=0,VGRAPH_MMA_WARP_PER_CHUNK_RESIDUAL=0
ab smol8 SmolLM2-135M 8 300 fused env:VGRAPH_MMA_WARP_PER_CHUNK_QKV=0,VGRAPH_MMA_WARP_PER_CHUNK_RESIDUAL=0
ab smol16 SmolLM2-135M 16 500 fused env:VGRAPH_GEMV_GATHER_RESIDUAL=0
cd $OUT && tar czf results.tgz r && rm -rf r

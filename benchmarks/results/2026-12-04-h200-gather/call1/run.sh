#!/usr/bin/env bash
# 2026-12-04 (nineteenth pass), call 1: the GEMVs' activations staged a chunk at a time against
# loads where they are used (gather_off), the down projection fused at 16 tokens (down16), and the
# eighteenth pass's changes, which have not run on a GPU either: the LM head's logits in the
# model's dtype against float32 logits (float32_logits), the tensor-core GEMV with a warp per
# chunk for the O projection (wpc_o) or for the QKV and O projections (wpc_qkv_o), the argmax
# after the head launched without PDL (argmax_plain). Step in turns and the engine loop; the GPU
# tests the changes touch (ops, including the gathered loads' bits against the old loads', the
# norm and rope kernels, argmax over 16-bit rows, decode model, greedy FULL = NONE with FULL's
# engine core in its own process, sampling, engine, piecewise); serving. The first four loop runs
# also profile 20 steps after their last round: span, busy and idle time a step, gaps.
# Per-layer kernel tables: the seventeenth pass's layer.py.
d=$(dirname $0); o=$OUT/r; mkdir -p $o
layer=$d/../../2026-12-04-h200-head-greedy/call1/layer.py
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
git log -1 --format=%H >> $o/env.txt 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py \
  tests/kernels/test_argmax_rows.py tests/kernels/test_logits_processors_kernel.py tests/kernels/test_layer_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="; grep -E "decode_$b " $o/$name.log | cut -c1-150
  python3 $layer $o/$name/latency_*.json; pack
}
ab smol16 SmolLM2-135M 16 300 fused gather_off float32_logits wpc_o wpc_qkv_o argmax_plain
ab llama16 Llama-3.2-1B 16 300 fused gather_off down16 float32_logits argmax_plain  # down16: the down projection on the tensor-core kernel, staged
ab smol1 SmolLM2-135M 1 500 fused gather_off float32_logits
ab llama1 Llama-3.2-1B 1 500 fused gather_off float32_logits argmax_plain
ab smol8 SmolLM2-135M 8 300 fused gather_off wpc_o wpc_qkv_o  # the eighteenth pass's call 7: wpc won at 8
i=0
for v in dtype nogather f32 wpc dtype nogather f32 wpc; do  # the engine loop: the tree / loads where used / float32 logits / + warp per chunk for O
  i=$((i+1)); flag=""; [ $v = f32 ] && flag="--float32-logits"; wpc=0; [ $v = wpc ] && wpc=1; gather=1; [ $v = nogather ] && gather=0
  [ $i -le 4 ] && flag="$flag --profile-steps 20"  # the first round of each: where the loop waits
  t0=$SECONDS; VGRAPH_GEMV_GATHER=$gather VGRAPH_MMA_WARP_PER_CHUNK_RESIDUAL=$wpc VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py \
    --models SmolLM2-135M Llama-3.2-1B --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 $flag --out $o/async_$v$i.json > $o/async_$v$i.log 2>&1
  echo "async $v rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/async_$v$i.log; grep "^profiled" $o/async_$v$i.log | cut -c1-220; pack
done
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests_e2e.log 2>&1
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
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_engine_gpu.py \
  tests/gpu/test_sampling_gpu.py > $o/tests_engine.log 2>&1
echo "engine + sampling tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_engine.log; grep -E "^FAILED|^ERROR" $o/tests_engine.log | head -8; pack
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_piecewise_gpu.py -k replayed_pieces > $o/tests_pw.log 2>&1
echo "piecewise tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_pw.log; grep -E "^FAILED|^ERROR" $o/tests_pw.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-05 (twenty-first pass), call 2. Call 1 found the CUDA-core kernel's staged activations
# at one token 2-3x slower (the LM heads: Llama-3.2-1B's 416 against 133 us), the tensor-core
# kernel's a gain at 16 tokens; this tree loads the CUDA-core kernel's activations where they are
# used again. Op tests; step in turns at the four target shapes (tree against gather_off, and at
# SmolLM2-135M's 16 tokens each op's switch off alone), the warp per chunk for O / QKV and O at
# 2-8 tokens (call 1: SmolLM2-135M's batch 8 0.523 against 0.564 ms with both); the engine loop,
# tree against all off, twice each with 8 rounds; the probe (probe.patch, Python only: with
# VGRAPH_PROBE_NO_FEED=1 the async engine's FULL graphs record their input copy and its FULL
# steps skip the token feed: the tokens are wrong, the time bounds moving both into the graph),
# twice each, the first profiling 20 steps; greedy FULL = NONE with the engine core in its own
# process.
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
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 120 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="; grep -E "decode_$b " $o/$name.log | cut -c1-150
  python3 $layer $o/$name/latency_*.json; pack
}
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py \
  tests/kernels/test_argmax_rows.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
off() { for op in "$@"; do printf 'env:VGRAPH_GEMV_GATHER_%s=0 ' $op; done; }
ab smol16 SmolLM2-135M 16 300 fused gather_off $(off QKV RESIDUAL GATE_UP) wpc_o
ab llama16 Llama-3.2-1B 16 300 fused gather_off wpc_o
ab smol1 SmolLM2-135M 1 500 fused gather_off
ab llama1 Llama-3.2-1B 1 500 fused gather_off
for b in 8 4 2; do ab smol$b SmolLM2-135M $b 300 fused wpc_o wpc_qkv_o; done
for b in 8 4; do ab llama$b Llama-3.2-1B $b 300 fused wpc_o wpc_qkv_o; done
for i in 1 2; do
  for v in tree nogather; do
    gather=1; [ $v = nogather ] && gather=0
    t0=$SECONDS; VGRAPH_GEMV_GATHER=$gather VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py \
      --models SmolLM2-135M Llama-3.2-1B --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 8 --out $o/async_$v$i.json > $o/async_$v$i.log 2>&1
    echo "async $v rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/async_$v$i.log; pack
  done
done
{ git apply $d/probe.patch 2>/dev/null || patch -p1 < $d/probe.patch; } || echo "probe.patch did not apply"
for i in 1 2; do
  for p in 0 1; do
    flag=""; [ $i = 1 ] && flag="--profile-steps 20"
    t0=$SECONDS; VGRAPH_PROBE_NO_FEED=$p VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 60 python3 benchmarks/bench_async_scheduling.py \
      --models SmolLM2-135M Llama-3.2-1B --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 $flag --out $o/probe${p}_$i.json > $o/probe${p}_$i.log 2>&1
    echo "probe no_feed=$p rc=$? in $((SECONDS-t0)) s"; grep -A5 "^model" $o/probe${p}_$i.log; grep "^profiled" $o/probe${p}_$i.log | cut -c1-220; pack
  done
done
{ git apply -R $d/probe.patch 2>/dev/null || patch -R -p1 < $d/probe.patch; } || echo "probe.patch did not come out"
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (seventh pass), call 1: the one-token CUDA-core GEMV loops a grid that fits over its
# pair groups where its CTAs exceed one wave (the next group's weights loaded before this one's
# dot products), and stages the K chunks after the first in shared memory before the PDL wait
# (Llama-3.2-1B's down projection). Builds csrc; the decode-op kernel tests on CUDA (every
# packing, loop grid and staging bit-equal to a CTA per pair); the decode step at one token,
# variants in turns (fused = both on, no_loop, loop2, loop3, no_smem) for the three configs; the
# engine loop, sync against async; the per-op benchmark at one token. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
ab() {  # name, timeout, models and variants, then -- bench args
  local name=$1 limit=$2; shift 2; t0=$SECONDS
  timeout $limit python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A12 "^decode step, median" $o/$name.log
}
ab ab_1 150 --models SmolLM2-135M Llama-3.2-1B Qwen3-0.6B --variants fused no_loop loop2 loop3 no_smem -- --modes FULL --batch-sizes 1
t0=$SECONDS; timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A10 "^model" $o/async_step.log
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
t0=$SECONDS; timeout 100 python3 benchmarks/bench_decode_kernels.py --tokens 1 --replays 20 --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernel bench rc=$? in $((SECONDS-t0)) s"; grep -B2 -A18 "^per call" $o/decode_kernels.log | grep -E "M |  1 " | head -20
cd $OUT && tar czf results.tgz r && rm -rf r

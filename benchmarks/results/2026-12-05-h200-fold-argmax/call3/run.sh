#!/usr/bin/env bash
# 2026-12-05 (twenty-fifth pass), call 3: the issue-12 targets on the final tree, after the wide-
# trigger call 2 and this README's call 1 have set the defaults. The way users run it: greedy
# FULL = NONE with FULL's engine core in its own process and the transformers parity tests; then
# benchmarks/run_gpu.sh's steps: the engine loop (SmolLM2-135M and Llama-3.2-1B, batch 1-16,
# async), the kernels of a SmolLM2-135M step (torch profiler), and `vgraph serve` (engine core in
# its own process, default mode and capture list) driven by `vgraph bench serve` at concurrency 1
# for both models. About 500 s; timeout 590. Switches that call 1 found winning may be given in
# front of the command (VGRAPH_X=1 bash .../run.sh), on the machine call 1 left warm, ahead of
# the commit that makes them the defaults: env.txt records them.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
git log -1 --format=%H >> $o/env.txt 2>/dev/null
env | grep '^VGRAPH_' | sort >> $o/env.txt  # switches given on the command line, if any
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
STEPS="ext" bash benchmarks/run_gpu.sh $o
t0=$SECONDS; timeout 180 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py \
  tests/gpu/test_engine_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8; pack
STEPS="async profile serve" SERVE_MODELS="SmolLM2-135M Llama-3.2-1B" bash benchmarks/run_gpu.sh $o
cd $OUT && tar czf results.tgz r && rm -rf r

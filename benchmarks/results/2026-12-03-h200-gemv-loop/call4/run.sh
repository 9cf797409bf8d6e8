#!/usr/bin/env bash
# 2026-12-03 (seventh pass), call 4: the final tree (Llama-3.2-1B's gate/up and final norm + LM
# head keep a CTA per group: their table entries forbid the loop, so its step runs the kernels of
# the sixth pass). Builds csrc; the decode step at one token for Llama-3.2-1B (fused against
# loop_all, which loops them as call 2 did); the engine loop, sync against async (the headline
# figures); the fused-decode GPU test (greedy tokens NONE against FULL, three configs) and the
# decode-op kernel tests. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A7 "^model" $o/async_step.log
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab_1 --models Llama-3.2-1B \
  --variants fused loop_all no_loop -- --modes FULL --batch-sizes 1 > $o/ab_1.log 2>&1
echo "ab_1 rc=$? in $((SECONDS-t0)) s"; grep -A4 "^decode step, median" $o/ab_1.log; grep -E "decode_1 " $o/ab_1.log | cut -c1-100
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=1 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py \
  tests/kernels/test_decode_ops.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (eighth pass), gemv-ahead call 1: the looping one-token GEMV keeps two groups'
# weights in flight ahead for small matrices (all of a CTA's weights loaded before the PDL wait),
# one elsewhere (as before). Builds csrc; the decode-op kernel tests (bit-equality over every
# loop setting); the decode step at one token, variants in turns (fused, ahead1 = one ahead
# everywhere: the seventh pass's kernel, ahead2 = two everywhere, no_loop) for the three configs; the per-op benchmark at one token; the engine loop,
# sync against async (SmolLM2-135M, Llama-3.2-1B); the fused-decode GPU test (greedy tokens
# NONE against FULL, three configs, engine core in its own process). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
t0=$SECONDS; timeout 130 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab_1 --models SmolLM2-135M Llama-3.2-1B Qwen3-0.6B \
  --variants fused ahead1 ahead2 no_loop -- --modes FULL --batch-sizes 1 > $o/ab_1.log 2>&1
echo "ab_1 rc=$? in $((SECONDS-t0)) s"; grep -A18 "^decode step, median" $o/ab_1.log; grep -E "decode_1 " $o/ab_1.log | cut -c1-120
t0=$SECONDS; timeout 40 python3 benchmarks/bench_decode_kernels.py --tokens 1 --replays 20 --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernel bench rc=$? in $((SECONDS-t0)) s"; grep -A16 "^config" $o/decode_kernels.log | head -17
t0=$SECONDS; timeout 60 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A7 "^model" $o/async_step.log
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

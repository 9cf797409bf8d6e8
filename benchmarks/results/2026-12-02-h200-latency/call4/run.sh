#!/usr/bin/env bash
# 2026-12-02, call 4: every decode kernel asks for the largest shared-memory carveout (one L1 /
# shared split for the whole chain, so no kernel waits for an SM to drain before it can start).
# Build; GPU tests (op tests, attention, the fused model against transformers, NONE vs FULL greedy
# identity); the decode step, variants in turns in one process (fused, carveout_default: the
# driver's split per kernel, torch), two rounds with kernel profiles; host stages; serving TPOT at
# concurrency 1 (engine core in its own process). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/kernels/test_paged_attention.py \
  tests/kernels/test_decode_model.py tests/gpu/test_fused_decode_gpu.py > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
for round in 1 2; do t0=$SECONDS; timeout 80 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B \
  --variants fused carveout_default torch --out-dir $o/ab$round -- --modes FULL --batch-sizes 1 4 8 16 > $o/ab$round.log 2>&1
  echo "ab $round rc=$? in $((SECONDS-t0)) s"; grep -A6 "variants timed in turns" $o/ab$round.log | tail -6; grep " kernels " $o/ab$round.log | grep "decode_1 " | cut -c1-200; done
t0=$SECONDS; timeout 45 python3 tools/profile_step.py --model SmolLM2-135M --batch 1 --modes FULL --mixed "" \
  --out $o/profile_SmolLM2-135M_b1.json > $o/profile_SmolLM2-135M.log 2>&1; echo "profile rc=$? in $((SECONDS-t0)) s"; grep "stages" $o/profile_SmolLM2-135M.log
t0=$SECONDS; STEPS="serve" timeout 100 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1; echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/*.log | head -4
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-02, call 4: the final tree (call 3's kernels; the per-shape table from call 3's kernel
# benchmark for SmolLM2-135M and Llama-3.2-1B). Base tree: 123e275 (.whl/base.tar). Builds; GPU
# tests (decode ops, the fused model against transformers, NONE vs FULL greedy identity, the
# engine, PIECEWISE / FULL_AND_PIECEWISE against NONE); the kernel benchmark (three configs); the
# decode step, base and final trees in turns (two rounds, separate processes), with kernel
# profiles; serving TPOT at concurrency 1 (engine core in its own process). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
NEW=$PWD; t0=$SECONDS; rm -rf /tmp/base; mkdir -p /tmp/base && tar xf .whl/base.tar -C /tmp/base
(cd /tmp/base && PYTHONPATH=/tmp/site:/tmp/base python3 -m vgraph.ext_build > $o/build_base.log 2>&1) &
PYTHONPATH=/tmp/site:$NEW python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$?"; wait; echo "builds in $((SECONDS-t0)) s"
export PYTHONPATH=/tmp/site:$NEW
t0=$SECONDS; timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py \
  tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py tests/gpu/test_piecewise_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_kernels.py --replays 20 --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernels rc=$? in $((SECONDS-t0)) s"; grep -A20 "^layer stack" $o/decode_kernels.log | head -20; grep "per op, fused" $o/decode_kernels.log
AB="--models SmolLM2-135M Llama-3.2-1B --variants fused"; BA="--modes FULL --batch-sizes 1 4 8 16"
for round in 1 2; do for tree in base new; do dir=$NEW; [ $tree = base ] && dir=/tmp/base
  t0=$SECONDS; (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 60 python3 benchmarks/bench_decode_step_ab.py $AB --out-dir $o/ab_$tree$round -- $BA \
    > $o/ab_$tree$round.log 2>&1); echo "ab $tree $round rc=$? in $((SECONDS-t0)) s"; grep -A2 "variants timed in turns" $o/ab_$tree$round.log | tail -2; done; done
grep " kernels " $o/ab_new2.log | grep "decode_1 \|decode_16" | cut -c1-230
t0=$SECONDS; STEPS="serve" timeout 100 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1; echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/*.log | head -4
cd $OUT && tar czf results.tgz r && rm -rf r

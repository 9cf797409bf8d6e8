#!/usr/bin/env bash
# 2026-12-02, call 3: one-token CUDA-core GEMV CTAs sized to K (one warp up to K = 1024); attention
# contexts of up to four pipeline iterations in one partition; the partials' merge loading two
# partials with its weights. Base tree: call 2's (.whl/base.tar, ef17bb1). Build; GPU tests (op
# tests, attention, the fused model against transformers, NONE vs FULL greedy identity); the
# per-op kernel benchmark; base and new trees in turns (two rounds, separate processes); the
# decode step with kernel profiles; host stages; serving TPOT at concurrency 1. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
NEW=$PWD; t0=$SECONDS; rm -rf /tmp/base; mkdir -p /tmp/base && tar xf .whl/base.tar -C /tmp/base
(cd /tmp/base && PYTHONPATH=/tmp/site:/tmp/base python3 -m vgraph.ext_build > $o/build_base.log 2>&1) &
PYTHONPATH=/tmp/site:$NEW python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$?"; wait; echo "builds in $((SECONDS-t0)) s"
export PYTHONPATH=/tmp/site:$NEW
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/kernels/test_paged_attention.py \
  tests/kernels/test_decode_model.py tests/gpu/test_fused_decode_gpu.py > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_kernels.py --replays 20 --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernels rc=$? in $((SECONDS-t0)) s"; grep -A8 "layer stack" $o/decode_kernels.log; grep "per op, fused" $o/decode_kernels.log
AB="--models SmolLM2-135M Llama-3.2-1B --variants fused torch"; BA="--modes FULL --batch-sizes 1 4 8 16 --no-kernel-profile"
for round in 1 2; do for tree in base new; do dir=$NEW; [ $tree = base ] && dir=/tmp/base
  t0=$SECONDS; (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 50 python3 benchmarks/bench_decode_step_ab.py $AB --out-dir $o/ab_$tree$round -- $BA \
    > $o/ab_$tree$round.log 2>&1); echo "ab $tree $round rc=$? in $((SECONDS-t0)) s"; grep -A4 "variants timed in turns" $o/ab_$tree$round.log | tail -4; done; done
t0=$SECONDS; timeout 80 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 16 > $o/ab.log 2>&1; echo "ab profile rc=$? in $((SECONDS-t0)) s"; grep " kernels " $o/ab.log | cut -c1-330
for m in SmolLM2-135M Llama-3.2-1B; do t0=$SECONDS; timeout 45 python3 tools/profile_step.py --model $m --batch 1 --modes FULL --mixed "" \
  --out $o/profile_${m}_b1.json > $o/profile_$m.log 2>&1; echo "profile $m rc=$? in $((SECONDS-t0)) s"; grep "stages" $o/profile_$m.log; done
t0=$SECONDS; STEPS="serve" timeout 100 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1; echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/*.log | head -4
cd $OUT && tar czf results.tgz r && rm -rf r

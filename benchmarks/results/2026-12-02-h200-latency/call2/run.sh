#!/usr/bin/env bash
# 2026-12-02, call 2: the per-shape table from call 1's kernel benchmark; build; GPU tests of the
# fused path (op tests, the fused model against transformers, NONE vs FULL greedy identity for the
# three configs); the decode step with kernel profiles (busy time per family); the previous
# commit's tree and this one in turns; attention partitions at 1,024 tokens of context; host
# stages of the batch-1 step; serving TPOT at concurrency 1 (engine core in its own process).
# Everything lands in one archive, results.tgz.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
NEW=$PWD; t0=$SECONDS
if [ ! -f /tmp/base/vgraph/_C.so ]; then mkdir -p /tmp/base && tar xf .whl/base.tar -C /tmp/base
  (cd /tmp/base && PYTHONPATH=/tmp/site:/tmp/base python3 -m vgraph.ext_build > $o/build_base.log 2>&1) & fi
PYTHONPATH=/tmp/site:$NEW python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$?"; wait; echo "builds in $((SECONDS-t0)) s"
export PYTHONPATH=/tmp/site:$NEW
t0=$SECONDS; timeout 140 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py \
  tests/gpu/test_fused_decode_gpu.py > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
t0=$SECONDS; timeout 100 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused torch \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 4 8 16 > $o/ab.log 2>&1; echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A4 "variants timed in turns" $o/ab.log | tail -4
grep " kernels " $o/ab.log | grep "decode_1 \|decode_16" | cut -c1-330
AB="--models SmolLM2-135M Llama-3.2-1B --variants fused torch"; BA="--modes FULL --batch-sizes 1 4 8 16 --no-kernel-profile"
for tree in base new; do dir=$NEW; [ $tree = base ] && dir=/tmp/base
  t0=$SECONDS; (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 50 python3 benchmarks/bench_decode_step_ab.py $AB --out-dir $o/ab_$tree -- $BA \
    > $o/ab_$tree.log 2>&1); echo "ab $tree rc=$? in $((SECONDS-t0)) s"; grep -A4 "variants timed in turns" $o/ab_$tree.log | tail -4; done
t0=$SECONDS; timeout 50 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused chunk256 \
  --out-dir $o/ab_ctx1024 -- --modes FULL --batch-sizes 1 4 16 --context-len 1024 --no-kernel-profile > $o/ab_ctx1024.log 2>&1
echo "ab ctx1024 rc=$? in $((SECONDS-t0)) s"; grep -A4 "variants timed in turns" $o/ab_ctx1024.log | tail -4
for m in SmolLM2-135M Llama-3.2-1B; do t0=$SECONDS; timeout 45 python3 tools/profile_step.py --model $m --batch 1 --modes FULL --mixed "" \
  --out $o/profile_${m}_b1.json > $o/profile_$m.log 2>&1; echo "profile $m rc=$? in $((SECONDS-t0)) s"; grep "stages" $o/profile_$m.log; done
t0=$SECONDS; STEPS="serve" timeout 100 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1; echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/*.log | head -4
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-02, call 3: RMSNorm's weight product in the dtype's packed multiply (both GEMV kernels;
# bit-equal) and the tensor-core kernel's reduction and epilogue spread over 2 NT warps. Base
# tree: 123e275 (.whl/base.tar). Builds; GPU tests (decode ops, the fused model against
# transformers, NONE vs FULL greedy identity, the engine); the kernel benchmark of both trees; the
# decode step, base and new trees in turns (two rounds, separate processes), with kernel profiles;
# serving TPOT at concurrency 1 (engine core in its own process). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
NEW=$PWD; t0=$SECONDS; rm -rf /tmp/base; mkdir -p /tmp/base && tar xf .whl/base.tar -C /tmp/base
(cd /tmp/base && PYTHONPATH=/tmp/site:/tmp/base python3 -m vgraph.ext_build > $o/build_base.log 2>&1) &
PYTHONPATH=/tmp/site:$NEW python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$?"; wait; echo "builds in $((SECONDS-t0)) s"
export PYTHONPATH=/tmp/site:$NEW
t0=$SECONDS; timeout 170 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py \
  tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
for tree in new base; do dir=$NEW; [ $tree = base ] && dir=/tmp/base
  t0=$SECONDS; (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 60 python3 benchmarks/bench_decode_kernels.py --configs SmolLM2-135M Llama-3.2-1B --replays 20 \
    --out $o/decode_kernels_$tree.json > $o/decode_kernels_$tree.log 2>&1); echo "kernels $tree rc=$? in $((SECONDS-t0)) s"; done
paste <(sed -n '/per call/,/layer stack/p' $o/decode_kernels_base.log | grep -v lm_head | cut -c1-50) <(sed -n '/per call/,/layer stack/p' $o/decode_kernels_new.log | grep -v lm_head | cut -c24-50)
paste <(grep -A14 "^layer stack" $o/decode_kernels_base.log | cut -c1-40) <(grep -A14 "^layer stack" $o/decode_kernels_new.log | cut -c17-40)
AB="--models SmolLM2-135M Llama-3.2-1B --variants fused"; BA="--modes FULL --batch-sizes 1 4 8 16"
for round in 1 2; do for tree in base new; do dir=$NEW; [ $tree = base ] && dir=/tmp/base
  t0=$SECONDS; (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 60 python3 benchmarks/bench_decode_step_ab.py $AB --out-dir $o/ab_$tree$round -- $BA \
    > $o/ab_$tree$round.log 2>&1); echo "ab $tree $round rc=$? in $((SECONDS-t0)) s"; grep -A2 "variants timed in turns" $o/ab_$tree$round.log | tail -2; done; done
grep " kernels " $o/ab_new2.log | grep "decode_1 \|decode_16" | cut -c1-200
t0=$SECONDS; STEPS="serve" timeout 100 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1; echo "serve in $((SECONDS-t0)) s"; grep -i "median tpot\|median ttft" $o/serve/*.log | head -4
cd $OUT && tar czf results.tgz r && rm -rf r

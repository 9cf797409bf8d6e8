#!/usr/bin/env bash
# 2026-12-02, call 1: the decode step's latency work (GEMV epilogue inputs and norm weight before
# the PDL wait, the residual with the activations, the tensor-core norm prologue in one pass,
# attention's leading cached stages before the wait and its post-wait loads together, the decode
# fast path of the input fill). Builds this tree and the previous commit's (.whl/base.tar, 344bc97);
# the changed kernels' tests; the decode step of both trees in separate processes, in turns
# (base, new, base, new); the per-op kernel benchmark; in-process variants of the new tree.
o=$OUT; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
NEW=$PWD; mkdir -p /tmp/base && tar xf .whl/base.tar -C /tmp/base
t0=$SECONDS; (cd /tmp/base && PYTHONPATH=/tmp/site:/tmp/base python3 -m vgraph.ext_build > $o/build_base.log 2>&1) &
PYTHONPATH=/tmp/site:$NEW python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$?"; wait; echo "builds in $((SECONDS-t0)) s"; tail -1 $o/build_base.log
export PYTHONPATH=/tmp/site:$NEW
t0=$SECONDS; timeout 110 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/kernels/test_paged_attention.py \
  > $o/tests_ops.log 2>&1; echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -5
AB="--models SmolLM2-135M Llama-3.2-1B --variants fused torch"; BA="--modes FULL --batch-sizes 1 4 8 16 --no-kernel-profile"
for round in 1 2; do for tree in base new; do
  dir=$NEW; [ $tree = base ] && dir=/tmp/base
  t0=$SECONDS; (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 75 python3 benchmarks/bench_decode_step_ab.py $AB --out-dir $o/ab_${tree}$round -- $BA \
    > $o/ab_${tree}$round.log 2>&1); echo "ab $tree $round rc=$? in $((SECONDS-t0)) s"; grep -A4 "variants timed in turns" $o/ab_${tree}$round.log | tail -4
done; done
t0=$SECONDS; timeout 100 python3 benchmarks/bench_decode_kernels.py --replays 20 --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernels rc=$? in $((SECONDS-t0)) s"; grep -A8 "layer stack" $o/decode_kernels.log; grep "per op, fused" $o/decode_kernels.log
t0=$SECONDS; timeout 90 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused chunk128 chunk256 \
  --out-dir $o/ab_chunk -- --modes FULL --batch-sizes 1 4 16 --no-kernel-profile > $o/ab_chunk.log 2>&1; echo "ab chunk rc=$? in $((SECONDS-t0)) s"; grep -A6 "variants timed in turns" $o/ab_chunk.log
tar czf $o/ab.tgz -C $o $(cd $o && ls -d ab_*/) && rm -rf $o/ab_*/

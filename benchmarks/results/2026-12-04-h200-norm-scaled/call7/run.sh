#!/usr/bin/env bash
# 2026-12-04, call 7: the tensor-core GEMV with a warp per chunk of K where there are 5-16 chunks
# (VGRAPH_MMA_WARP_PER_CHUNK: SmolLM2-135M's QKV and O at 2-32 tokens, 9 warps rather than 8).
# Its op test; SmolLM2-135M's batch-16 step in turns; the engine loop with the switch off and on.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 40 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py -k "warp_per_chunk or split_by_tokens" > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 90 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/smol --models SmolLM2-135M \
  --variants fused warp_per_chunk -- --modes FULL --num-iters 500 --batch-sizes 8 16 > $o/smol.log 2>&1
echo "smol rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/smol.log | grep "B="; grep -E "decode_(8|16) " $o/smol.log | cut -c1-170; pack
for v in 0 1; do
  t0=$SECONDS; VGRAPH_MMA_WARP_PER_CHUNK=$v VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 45 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M \
    --batch-sizes 1 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_wpc$v.json > $o/async_wpc$v.log 2>&1
  echo "async warp_per_chunk=$v rc=$? in $((SECONDS-t0)) s"; grep -A3 "^model" $o/async_wpc$v.log; pack
done
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-05 (twenty-eighth pass), call 4: what call 3 (fold-argmax call3/run.sh with
# VGRAPH_WIDE_PACK=1) left: its e2e tests ran out of time after a failure in
# test_full_equals_none_with_wide_packed_weights[Qwen3-0.6B-13]. Those Qwen3-0.6B tests again
# with their output, the transformers parity tests with the packed weights, and the kernels of a
# SmolLM2-135M step (tools/profile_step.py, fixed). About 300 s; timeout 420.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
git log -1 --format=%H >> $o/env.txt 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
STEPS="ext" bash benchmarks/run_gpu.sh $o
t0=$SECONDS; timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py \
  -k "Qwen3 and (wide_packed or fused_path)" > $o/tests_qwen.log 2>&1
echo "qwen tests rc=$? in $((SECONDS-t0)) s"; grep -E "^FAILED|^ERROR|assert|Error" $o/tests_qwen.log | head -20; tail -1 $o/tests_qwen.log; pack
t0=$SECONDS; VGRAPH_WIDE_PACK=1 timeout 150 python3 -m pytest -q -p no:cacheprovider --durations=5 tests/gpu/test_engine_gpu.py > $o/tests_engine.log 2>&1
echo "engine tests rc=$? in $((SECONDS-t0)) s"; grep -E "^FAILED|^ERROR" $o/tests_engine.log | head -8; tail -1 $o/tests_engine.log; pack
VGRAPH_WIDE_PACK=1 STEPS="profile" bash benchmarks/run_gpu.sh $o
cd $OUT && tar czf results.tgz r && rm -rf r

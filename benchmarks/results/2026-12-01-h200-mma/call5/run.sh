#!/usr/bin/env bash
# 2026-12-01 (night), call 5: the table with the CUDA-core kernel for the residual ops at one token
# (call 4: the tensor-core choice lost 0.08 ms in the Llama-3.2-1B step); build; NONE vs FULL
# greedy identity for the three configs and the op tests; the decode step A/B again.
o=$OUT; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py tests/kernels/test_decode_ops.py \
  > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED" $o/tests.log | head -5
t0=$SECONDS; timeout 100 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused cuda_core torch \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 4 8 16 > $o/ab.log 2>&1; echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A8 "variants timed in turns" $o/ab.log; grep " kernels " $o/ab.log | grep "decode_1 \|decode_16" | head -12
tar czf $o/ab.tgz -C $o ab && rm -rf $o/ab

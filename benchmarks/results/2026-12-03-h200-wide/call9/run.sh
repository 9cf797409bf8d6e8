#!/usr/bin/env bash
# 2026-12-04, call 9: Llama-3.2-1B's gate/up on the wide GEMV at one token too (18.3 us a call
# against 19.1 on CUDA cores in call 4). Builds csrc; the decode-op tests; the batch-1 step in
# turns against gate/up on CUDA cores at one token (wide_gate_up_from2), 500 steps a variant;
# greedy NONE = FULL; the engine loop, sync against async. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/llama --models Llama-3.2-1B \
  --variants fused wide_gate_up_from2 -- --modes FULL --num-iters 500 --batch-sizes 1 2 > $o/llama.log 2>&1
echo "llama rc=$? in $((SECONDS-t0)) s"; grep -A3 "^decode step, median" $o/llama.log; grep -E "decode_1 " $o/llama.log | cut -c1-200
cd $OUT && tar czf results.tgz r; cd - > /dev/null
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fused_decode_gpu.py > $o/tests_e2e.log 2>&1
echo "e2e tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_e2e.log; grep -E "^FAILED|^ERROR" $o/tests_e2e.log | head -8
t0=$SECONDS; timeout 50 python3 benchmarks/bench_async_scheduling.py --models Llama-3.2-1B \
  --batch-sizes 1 4 16 --capture-sizes 1 2 4 8 16 --rounds 5 --out $o/async_step.json > $o/async_step.log 2>&1
echo "async bench rc=$? in $((SECONDS-t0)) s"; grep -A4 "^model" $o/async_step.log
cd $OUT && tar czf results.tgz r && rm -rf r

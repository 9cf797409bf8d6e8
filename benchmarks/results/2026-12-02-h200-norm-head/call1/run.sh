#!/usr/bin/env bash
# 2026-12-02 (fifth pass), call 1: row pairs packed several to a CTA by the one-token CUDA-core
# GEMV (each pair on whole warps of its own), the final norm as the LM head's prologue
# (rms_norm_linear_out). Builds csrc; the fused-op kernel tests on CUDA; the per-op benchmark at
# 1, 2 and 16 tokens (one_pair column: VGRAPH_GEMV_PAIRS=1); the decode step in FULL with the
# variants in turns (fused, one_pair, norm_apart); then the sampling and async-scheduling GPU
# tests (the processors' overlap and the split launch, not yet run on CUDA). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 100 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py > $o/kernel_tests.log 2>&1
echo "kernel tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/kernel_tests.log; grep -E "^FAILED|^ERROR" $o/kernel_tests.log | head -8
t0=$SECONDS; timeout 90 python3 benchmarks/bench_decode_kernels.py --configs SmolLM2-135M Llama-3.2-1B --tokens 1 2 16 \
  --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernel bench rc=$? in $((SECONDS-t0)) s"; grep -E "^(config|SmolLM2|Llama)" $o/decode_kernels.log | head -40; grep "thresholds\|max_tokens" $o/decode_kernels.log | tail -1
t0=$SECONDS; timeout 200 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused one_pair norm_apart \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 16 > $o/ab.log 2>&1
echo "step ab rc=$? in $((SECONDS-t0)) s"; grep -A8 "^decode step, median" $o/ab.log
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_sampling_gpu.py tests/gpu/test_async_scheduling_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-01 (afternoon), call 1: attention with the K/V append + PDL.
o=$OUT/r; mkdir -p $o
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> $o/env.txt
export PYTHONUNBUFFERED=1
STEPS="ext" bash benchmarks/run_gpu.sh $o
timeout 200 python3 -m pytest -q -p no:cacheprovider -x tests/kernels/test_paged_attention.py \
  tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py tests/kernels/test_reshape_and_cache.py \
  tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py tests/gpu/test_piecewise_gpu.py \
  tests/gpu/test_cascade_gpu.py -k "cuda or gpu or Cuda or full or graph or transformers or equal or real" \
  > $o/tests.log 2>&1; echo "tests rc=$?"; tail -4 $o/tests.log
VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 200 python3 benchmarks/bench_decode_step_ab.py \
  --models SmolLM2-135M Llama-3.2-1B --out-dir $o/ab -- --modes FULL --batch-sizes 1 4 16 \
  > $o/ab.log 2>&1; echo "ab rc=$?"; grep -v "graph/s\]" $o/ab.log | grep -A30 "decode step, median"; grep "kernels" $o/ab.log | head -20
VGRAPH_ATTN_MIN_CHUNK=256 VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 120 python3 benchmarks/bench_decode_step_ab.py \
  --models SmolLM2-135M Llama-3.2-1B --variants fused --out-dir $o/ab_chunk256 -- --modes FULL --batch-sizes 1 4 16 \
  --no-kernel-profile > $o/ab_chunk256.log 2>&1; echo "ab256 rc=$?"; grep -A6 "decode step, median" $o/ab_chunk256.log
VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 tools/profile_step.py --model SmolLM2-135M --batch 1 \
  --modes FULL --mixed "" --out $o/profile_SmolLM2-135M_b1.json > $o/profile.log 2>&1; echo "profile rc=$?"
grep -v "graph/s\]" $o/profile.log | tail -25
STEPS="serve" bash benchmarks/run_gpu.sh $o

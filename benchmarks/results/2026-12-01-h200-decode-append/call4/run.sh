#!/usr/bin/env bash
# 2026-12-01 (afternoon), call 4: the append only over earlier steps' KV (same-step
# prefix hits write first); GPU tests; variants in turns at two contexts; kernel bench; profile;
# serve. All results in one tarball.
o=/tmp/res; mkdir -p $o
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
STEPS="ext" bash benchmarks/run_gpu.sh $o > /dev/null; tail -1 $o/run.log
timeout 220 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_paged_attention.py \
  tests/kernels/test_decode_model.py tests/kernels/test_reshape_and_cache.py tests/kernels/test_cascade_attention.py \
  tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py tests/gpu/test_piecewise_gpu.py \
  tests/gpu/test_cascade_gpu.py tests/gpu/test_graph_pool_gpu.py \
  -k "(cuda or gpu or Cuda or full or graph or transformers or equal or real or replay or capture or identity) and not bad_arguments and not bad_prefix" \
  > $o/tests.log 2>&1; echo "tests rc=$?"; tail -2 $o/tests.log; grep FAILED $o/tests.log | head
timeout 200 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --out-dir $o/ab_ctx128 \
  -- --modes FULL --batch-sizes 1 4 16 > $o/ab_ctx128.log 2>&1; echo "ab128 rc=$?"; grep -A7 "variants timed in turns" $o/ab_ctx128.log
grep " kernels " $o/ab_ctx128.log | grep decode_1
timeout 150 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused no_append \
  --out-dir $o/ab_ctx1024 -- --modes FULL --batch-sizes 1 16 --context-len 1024 --no-kernel-profile \
  > $o/ab_ctx1024.log 2>&1; echo "ab1024 rc=$?"; grep -A5 "variants timed in turns" $o/ab_ctx1024.log
timeout 80 python3 benchmarks/bench_paged_attention.py --no-flashinfer --batches 1 8 32 128 \
  --contexts 128 512 2048 8192 --replays 30 --out $o/paged_attention.json > $o/paged_attention.log 2>&1; echo "attn rc=$?"
timeout 100 python3 tools/profile_step.py --model SmolLM2-135M --batch 1 --modes FULL --mixed "" \
  --out $o/profile_SmolLM2-135M_b1.json > $o/profile.log 2>&1; echo "profile rc=$?"; grep "stages" $o/profile.log
STEPS="serve" bash benchmarks/run_gpu.sh $o | grep -i "tpot"
tar czf $OUT/res.tgz -C $o .

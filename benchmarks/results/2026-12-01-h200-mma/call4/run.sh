#!/usr/bin/env bash
# 2026-12-01 (night), call 4, the committed per-shape table: build; the GPU tests of the decode
# path (ops, argmax, attention, model vs transformers, NONE vs FULL for the three configs, engine,
# piecewise, graph pool, sampling); the decode step A/B (fused / CUDA-core only / torch) at
# B = 1, 4, 8, 16 for both models; serve TPOT at concurrency 1 (engine core in its own process);
# a Llama-3.2-1B batch-1 profile.
o=$OUT; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py tests/kernels/test_argmax_rows.py \
  tests/kernels/test_paged_attention.py tests/kernels/test_decode_model.py tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py \
  tests/gpu/test_piecewise_gpu.py tests/gpu/test_graph_pool_gpu.py tests/gpu/test_sampling_gpu.py \
  -k "cuda or gpu or Cuda or full or graph or transformers or equal or real or replay or capture or identity or mma or agree or greedy" \
  > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
t0=$SECONDS; timeout 100 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused cuda_core torch \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 4 8 16 > $o/ab.log 2>&1; echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A8 "variants timed in turns" $o/ab.log; grep " kernels " $o/ab.log | grep "decode_1 \|decode_16" | head -12
t0=$SECONDS; STEPS="serve" bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1; echo "serve in $((SECONDS-t0)) s"; grep -i "tpot\|ttft" $o/serve/run.log | head -6
t0=$SECONDS; timeout 80 python3 tools/profile_step.py --model Llama-3.2-1B --batch 1 --modes FULL --mixed "" \
  --out $o/profile_Llama-3.2-1B_b1.json > $o/profile.log 2>&1; echo "profile rc=$? in $((SECONDS-t0)) s"; grep -A12 "kernels, " $o/profile.log | head -14; grep "stages" $o/profile.log
tar czf $o/ab.tgz -C $o ab serve && rm -rf $o/ab $o/serve

#!/usr/bin/env bash
# 2026-12-01 (afternoon), call 3: attention prefetch before the PDL wait; variants in
# turns; cascade divergence diagnosis; unwind diagnosis; all results in one tarball.
o=/tmp/res; mkdir -p $o
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
STEPS="ext" bash benchmarks/run_gpu.sh $o > /dev/null; tail -1 $o/run.log
(readelf -d vgraph/_C.so | grep NEEDED; echo "defined: $(nm -D --defined-only vgraph/_C.so | grep -c '__cxa_throw\|_Unwind_RaiseException\|__gxx_personality')"
 python3 -c "
import torch
try: torch.mm(torch.ones(2,3), torch.ones(2,3))
except RuntimeError as e: print('torch raised:', str(e)[:60])") > $o/segv_diag2.log 2>&1; cat $o/segv_diag2.log
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_paged_attention.py \
  tests/kernels/test_decode_model.py tests/kernels/test_reshape_and_cache.py tests/gpu/test_fused_decode_gpu.py \
  tests/gpu/test_engine_gpu.py tests/gpu/test_piecewise_gpu.py tests/gpu/test_graph_pool_gpu.py \
  -k "(cuda or gpu or Cuda or full or graph or transformers or equal or real or replay or capture) and not bad_arguments" \
  > $o/tests.log 2>&1; echo "tests rc=$?"; tail -2 $o/tests.log
timeout 150 python3 .whl/casc_diag.py > $o/casc_diag.log 2>&1; echo "casc rc=$?"; grep -v "graph/s\]\|it/s\]" $o/casc_diag.log | tail -14
timeout 100 python3 benchmarks/bench_paged_attention.py --no-flashinfer --batches 1 8 32 128 \
  --contexts 128 512 2048 8192 --replays 30 --out $o/paged_attention.json > $o/paged_attention.log 2>&1; echo "attn rc=$?"
timeout 200 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --out-dir $o/ab \
  -- --modes FULL --batch-sizes 1 4 16 > $o/ab.log 2>&1; echo "ab rc=$?"; grep -A7 "variants timed in turns" $o/ab.log; grep " kernels " $o/ab.log
timeout 100 python3 tools/profile_step.py --model SmolLM2-135M --batch 1 --modes FULL --mixed "" \
  --out $o/profile_SmolLM2-135M_b1.json > $o/profile.log 2>&1; echo "profile rc=$?"; grep "stages" $o/profile.log
STEPS="serve" bash benchmarks/run_gpu.sh $o | grep -i "tpot"
tar czf $OUT/res.tgz -C $o .

#!/usr/bin/env bash
# 2026-12-01 (night), call 3 (tensor-core kernel: 64 contiguous bytes of a row per load instruction, warps per CTA from the tile count): build; the fused-op and argmax tests; the per-op kernel
# benchmark (CUDA-core vs tensor-core GEMV vs unfused); the greedy argmax benchmark; the decode
# step A/B (fused with the table, CUDA-core only, torch) at B = 1, 4, 16; a Llama-3.2-1B profile.
o=$OUT; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
git log --oneline -1 >> $o/env.txt 2>/dev/null
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -2 $o/build.log
t0=$SECONDS; timeout 110 python3 -m pytest -q -p no:cacheprovider -x tests/kernels/test_decode_ops.py tests/kernels/test_argmax_rows.py \
  > $o/tests_ops.log 2>&1; echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|Error" $o/tests_ops.log | head -5
t0=$SECONDS; timeout 110 python3 benchmarks/bench_decode_kernels.py --replays 20 --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernels rc=$? in $((SECONDS-t0)) s"; grep -A30 "layer stack" $o/decode_kernels.log
t0=$SECONDS; timeout 140 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused cuda_core torch \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 4 16 > $o/ab.log 2>&1; echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A8 "variants timed in turns" $o/ab.log; grep " kernels " $o/ab.log | head -12
tar czf $o/ab.tgz -C $o ab && rm -rf $o/ab

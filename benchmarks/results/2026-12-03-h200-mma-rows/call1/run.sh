#!/usr/bin/env bash
# 2026-12-03 (ninth pass), mma-rows call 1: the tensor-core GEMV gives a CTA 1, 2 or 4 row tiles
# (VGRAPH_MMA_RT; the launcher's rule: 4 while the grid keeps a CTA per SM). Builds csrc; the
# decode-op kernel tests (row tiles bit-equal to one); the per-op benchmark at 2-16 tokens (mma
# with the rule against 1 / 2 / 4 row tiles forced, the CUDA-core kernel, the unfused sequence);
# the decode step at 4, 8 and 16 tokens, variants in turns: Llama-3.2-1B fused (the table), rt1,
# gate_up16 (its gate/up fused up to 16 tokens), gate_up16_rt1, all16 (gate/up, QKV and down
# fused up to 16); Qwen3-0.6B fused, rt1, gate_up16. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
t0=$SECONDS; timeout 100 python3 benchmarks/bench_decode_kernels.py --tokens 2 4 8 16 --replays 20 --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernel bench rc=$? in $((SECONDS-t0)) s"; grep -A62 "^config" $o/decode_kernels.log | head -90
t0=$SECONDS; timeout 110 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab_llama --models Llama-3.2-1B \
  --variants fused rt1 gate_up16 gate_up16_rt1 all16 -- --modes FULL --batch-sizes 4 8 16 > $o/ab_llama.log 2>&1
echo "ab_llama rc=$? in $((SECONDS-t0)) s"; grep -A8 "^decode step, median" $o/ab_llama.log; grep -E "decode_16 " $o/ab_llama.log | cut -c1-150
t0=$SECONDS; timeout 80 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab_qwen --models Qwen3-0.6B \
  --variants fused rt1 gate_up16 -- --modes FULL --batch-sizes 4 8 16 > $o/ab_qwen.log 2>&1
echo "ab_qwen rc=$? in $((SECONDS-t0)) s"; grep -A6 "^decode step, median" $o/ab_qwen.log
cd $OUT && tar czf results.tgz r && rm -rf r

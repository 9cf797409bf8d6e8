#!/usr/bin/env bash
# 2026-12-02, stride call 1: the one-token CUDA-core GEMV on a grid of N CTAs per SM striding over
# the row pairs (VGRAPH_GEMV_CTAS_PER_SM=N; 0 = a CTA per pair, the code's default). Build; the
# decode-op tests (bit-equality of the striding grid with a CTA per pair); the per-op kernel
# benchmark at one token for N = 0, 2, 4, 8, 16; the batch-1 decode step with the variants in
# turns in one process; the step's timeline without synchronizes (host stages, GPU span). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
for n in 0 2 4 8 16; do t0=$SECONDS; VGRAPH_GEMV_CTAS_PER_SM=$n timeout 40 python3 benchmarks/bench_decode_kernels.py --tokens 1 --replays 20 --out $o/decode_kernels_$n.json > $o/decode_kernels_$n.log 2>&1
  echo "kernels $n rc=$? in $((SECONDS-t0)) s"; grep -E "^(SmolLM2|Llama|Qwen3)" $o/decode_kernels_$n.log | awk '{printf "%s/%s %s %s | ", $1, $2, $4, $6} END {print ""}'; done
t0=$SECONDS; timeout 150 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants pair_ctas stride2 stride4 stride8 stride16 \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 --no-kernel-profile > $o/ab.log 2>&1; echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A10 "variants timed in turns" $o/ab.log
for m in SmolLM2-135M Llama-3.2-1B; do t0=$SECONDS; timeout 50 python3 tools/profile_step.py --model $m --batch 1 --modes FULL --mixed "" \
  --out $o/profile_${m}_b1.json > $o/profile_$m.log 2>&1; echo "profile $m rc=$? in $((SECONDS-t0)) s"; grep -E "stages|timeline" $o/profile_$m.log; done
cd $OUT && tar czf results.tgz r && rm -rf r

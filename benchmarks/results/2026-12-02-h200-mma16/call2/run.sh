#!/usr/bin/env bash
# 2026-12-02, call 2: the tensor-core GEMV with its activations staged in shared memory. Build;
# the decode ops' GPU tests (staged and unstaged against the float32 reference and cuBLAS); the
# chained kernel benchmark, staged (three configs, the token ladder) and unstaged; the decode step,
# fused (staged) against unstaged in turns; one archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; grep -iE "error" $o/build.log | head -5
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_ops.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
t0=$SECONDS; timeout 150 python3 benchmarks/bench_decode_kernels.py --replays 20 --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1
echo "kernels rc=$? in $((SECONDS-t0)) s"; sed -n '/per call/,$p' $o/decode_kernels.log | grep -v "lm_head"
t0=$SECONDS; VGRAPH_MMA_STAGE=0 timeout 60 python3 benchmarks/bench_decode_kernels.py --configs SmolLM2-135M Llama-3.2-1B --tokens 4 8 16 --replays 20 \
  --out $o/decode_kernels_unstaged.json > $o/decode_kernels_unstaged.log 2>&1; echo "kernels unstaged rc=$? in $((SECONDS-t0)) s"
sed -n '/per call/,/per op/p' $o/decode_kernels_unstaged.log | grep -v lm_head
t0=$SECONDS; timeout 150 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused unstaged \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 4 8 16 > $o/ab.log 2>&1; echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A6 "variants timed in turns" $o/ab.log | tail -6
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (eleventh pass), call 1: the wide tensor-core GEMV (a CTA of up to 8 row tiles over
# activations staged once in shared memory, K split over a thread-block cluster). Builds csrc; the
# decode-op tests (the wide kernel at every split and tiles a CTA, in a CUDA graph with clusters
# and PDL); the kernel benchmark with the wide sweep on Llama-3.2-1B, plain on the other two; the
# decode step in turns, the table against the wide variants. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 150 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR|Error" $o/tests_ops.log | head -8
t0=$SECONDS; timeout 130 python3 benchmarks/bench_decode_kernels.py --configs Llama-3.2-1B --tokens 1 8 16 --no-stacks --wide-sweep --replays 20 --out $o/kernels_llama.json > $o/kernels_llama.log 2>&1
echo "kernels llama rc=$? in $((SECONDS-t0)) s"; grep -A16 "^per call" $o/kernels_llama.log; grep -A16 "^the wide kernel" $o/kernels_llama.log | cut -c1-260
cd $OUT && tar czf results.tgz r; cd - > /dev/null
ab() {  # name, models, variants, bench args
  local name=$1 models=$2 variants=$3; shift 3; local t0=$SECONDS
  timeout 110 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $models --variants $variants -- --modes FULL "$@" > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A6 "^decode step, median" $o/$name.log; grep -E "decode_(1|16) " $o/$name.log | cut -c1-230
}
ab llama Llama-3.2-1B "fused wide wide_head wide1" --batch-sizes 1 16
cd $OUT && tar czf results.tgz r; cd - > /dev/null
ab smol SmolLM2-135M "fused wide wide1" --batch-sizes 1 16
t0=$SECONDS; timeout 90 python3 benchmarks/bench_decode_kernels.py --configs SmolLM2-135M Qwen3-0.6B --tokens 1 16 --no-stacks --replays 20 --out $o/kernels_other.json > $o/kernels_other.log 2>&1
echo "kernels other rc=$? in $((SECONDS-t0)) s"; grep -A12 "^per call" $o/kernels_other.log
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-03 (eleventh pass), call 3: the wide GEMV's ops without a norm stage their activations
# in 8 parts, each with an mbarrier, so the warps start on the first part; and a probe
# (VGRAPH_WIDE_PROBE=1, wrong results, call3/probe.patch) in which the norm ops skip their staging
# and norm: how much of their time the wait for the activations takes. Builds csrc; the decode-op
# tests; the kernel benchmark with the wide sweep on Llama-3.2-1B (1, 8, 16 tokens), with and
# without the probe, and on Qwen3-0.6B and SmolLM2-135M (16). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
k() {  # name, configs, tokens
  local t0=$SECONDS
  timeout 100 python3 benchmarks/bench_decode_kernels.py --configs $2 --tokens $3 --no-stacks --wide-sweep --replays 20 --out $o/$1.json > $o/$1.log 2>&1
  echo "$1 rc=$? in $((SECONDS-t0)) s"; grep -A16 "^per call" $o/$1.log; grep -A16 "^the wide kernel" $o/$1.log | cut -c1-300
}
k kernels_llama Llama-3.2-1B "1 8 16"
VGRAPH_WIDE_PROBE=1 k kernels_llama_probe Llama-3.2-1B "8 16"
k kernels_other "Qwen3-0.6B SmolLM2-135M" 16
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-04, call 1: attention copying every cached position before its wait (the default in this
# tree; VGRAPH_ATTN_EARLY=0 is the earlier rule), its partitions capped (VGRAPH_ATTN_MAX_PARTS), and
# the GEMVs' weight loads with an L2 evict-first policy (VGRAPH_GEMV_L2_EVICT_FIRST=1). Builds
# csrc; the op tests of the switches; the decode step in turns at batch 1 and 16 for both models
# (per-layer kernel times by layer.py).
d=$(dirname $0); o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
pack() { (cd $OUT && tar czf results.tgz r); }
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -1 $o/build.log
t0=$SECONDS; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_paged_attention.py \
  tests/kernels/test_decode_ops.py -k "early or switches or group_heads or partitions or norm_scaled or wide_kernel_splits or graph" > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8; pack
ab() {  # name model batch iters variants...
  local name=$1 model=$2 b=$3 n=$4; shift 4
  t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/$name --models $model \
    --variants "$@" -- --modes FULL --num-iters $n --batch-sizes $b > $o/$name.log 2>&1
  echo "$name rc=$? in $((SECONDS-t0)) s"; grep -A9 "^decode step, median" $o/$name.log | grep "B="; grep -E "decode_$b " $o/$name.log | cut -c1-190
  python3 $d/layer.py $o/$name/latency_*.json; pack
}
ab llama1 Llama-3.2-1B 1 500 fused attn_early_stages attn_parts1 attn_parts4 l2_evict_first
ab smol1 SmolLM2-135M 1 500 fused attn_early_stages attn_parts1 l2_evict_first
ab llama16 Llama-3.2-1B 16 300 fused attn_early_stages attn_parts1 l2_evict_first attn_gt2
ab smol16 SmolLM2-135M 16 300 fused attn_early_stages l2_evict_first
cd $OUT && tar czf results.tgz r && rm -rf r

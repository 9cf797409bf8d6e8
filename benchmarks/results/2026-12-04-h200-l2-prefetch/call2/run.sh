#!/usr/bin/env bash
# 2026-12-04, call 2: the L2 prefetch probe (l2_probe.cu: how long issuing prefetches keeps a
# kernel alive, and what a read of prefetched bytes gains); then `vgraph serve` of Llama-3.2-1B
# and Qwen3-0.6B (engine core in its own process, dummy weights) under `vgraph bench serve` at
# concurrency 1 and 16, on the tree with the prefetch off (its default). One archive.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
d=benchmarks/results/2026-12-04-h200-l2-prefetch/call2
t0=$SECONDS; nvcc -O3 -arch=sm_90 $d/l2_probe.cu -o /tmp/l2_probe && timeout 60 /tmp/l2_probe > $o/l2_probe.txt 2>&1
echo "probe rc=$? in $((SECONDS-t0)) s"; cat $o/l2_probe.txt
cd $OUT && tar czf results.tgz r; cd - > /dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; SERVE_MODELS="Llama-3.2-1B Qwen3-0.6B" SERVE_CONCURRENCY="1 16" STEPS="serve" timeout 330 bash benchmarks/run_gpu.sh $o/serve > /dev/null 2>&1
echo "serve rc=$? in $((SECONDS-t0)) s"; grep -E "^== serve|Median TPOT|Median TTFT|Successful|Output token throughput" $o/serve/run.log
cd $OUT && tar czf results.tgz r && rm -rf r

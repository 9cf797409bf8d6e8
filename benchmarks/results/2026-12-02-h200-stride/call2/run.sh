#!/usr/bin/env bash
# 2026-12-02, call 2: what a graph replay costs the host and whether the GPU waits for it
# (benchmarks/bench_graph_launch.py, PDL on and off); the SmolLM2-135M batch-1 step's timeline
# with PDL on and off. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
for pdl in 1 0; do t0=$SECONDS; VGRAPH_PDL=$pdl timeout 60 python3 benchmarks/bench_graph_launch.py --out $o/graph_launch_pdl$pdl.json > $o/graph_launch_pdl$pdl.log 2>&1
  echo "launch pdl=$pdl rc=$? in $((SECONDS-t0)) s"; cat $o/graph_launch_pdl$pdl.log | tail -18; done
for pdl in 1 0; do t0=$SECONDS; VGRAPH_PDL=$pdl timeout 50 python3 tools/profile_step.py --model SmolLM2-135M --batch 1 --modes FULL --mixed "" \
  --out $o/profile_pdl$pdl.json > $o/profile_pdl$pdl.log 2>&1; echo "profile pdl=$pdl rc=$? in $((SECONDS-t0)) s"; grep -E "stages|timeline" $o/profile_pdl$pdl.log; done
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-02, call 4: the FULL graph's own GPU time with its launch hidden (a sleeping stream),
# against its replay call and replay + synchronize (tools/profile_step.py); the same for chains
# of N kernels, one graph or several (benchmarks/bench_graph_launch.py). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 60 python3 benchmarks/bench_graph_launch.py --lengths 40 160 --out $o/graph_launch.json > $o/graph_launch.log 2>&1
echo "launch rc=$? in $((SECONDS-t0)) s"; tail -10 $o/graph_launch.log
for m in SmolLM2-135M Llama-3.2-1B; do t0=$SECONDS; timeout 90 python3 tools/profile_step.py --model $m --batch 1 --modes FULL --mixed "" \
  --out $o/profile_$m.json > $o/profile_$m.log 2>&1; echo "profile $m rc=$? in $((SECONDS-t0)) s"; grep -E "stages|timeline|replay alone" $o/profile_$m.log; done
cd $OUT && tar czf results.tgz r && rm -rf r

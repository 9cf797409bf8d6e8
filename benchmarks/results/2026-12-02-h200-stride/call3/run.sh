#!/usr/bin/env bash
# 2026-12-02, call 3: where the host's time goes in a FULL batch-1 step (tools/profile_step.py:
# the timeline, cProfile per function, the graph's replay call alone). One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
lscpu | grep -E "Model name|MHz|^CPU\(s\)" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
for m in SmolLM2-135M Llama-3.2-1B; do t0=$SECONDS; timeout 90 python3 tools/profile_step.py --model $m --batch 1 --modes FULL --mixed "" \
  --out $o/profile_$m.json > $o/profile_$m.log 2>&1; echo "profile $m rc=$? in $((SECONDS-t0)) s"; grep -E -A22 "stages|timeline|python|replay alone" $o/profile_$m.log | grep -v "^--" | head -30; done
cat $o/env.txt
cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-05 (twenty-eighth pass), call 1: the layout probe (probe_layout.py); then, on an H200
# only, the issue-12 targets on the final tree (fold-argmax call 3).
o=$OUT/r; mkdir -p $o
d=benchmarks/results/2026-12-05-h200-wide-pack
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env_probe.txt
t0=$SECONDS; timeout 240 python3 $d/probe_layout.py $o/probe_layout.json > $o/probe_layout.log 2>&1
echo "probe rc=$? in $((SECONDS-t0)) s"; cat $o/probe_layout.log | grep -v -i warn | tail -12
(cd $OUT && tar czf probe.tgz r)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash benchmarks/results/2026-12-05-h200-fold-argmax/call3/run.sh
fi

#!/usr/bin/env bash
# 2026-12-02, call 1b (the same machine as call 1, whose ncu step could not find the ops): Nsight
# Compute on single launches of call1/ncu_mma.py.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
d=benchmarks/results/2026-12-02-h200-mma16/call1
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 200 ncu --clock-control none -k regex:gemv --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats -o $o/mma python3 $d/ncu_mma.py > $o/ncu.log 2>&1
echo "ncu rc=$? in $((SECONDS-t0)) s"; tail -3 $o/ncu.log
ncu -i $o/mma.ncu-rep --page details > $o/ncu_details.txt 2>&1; grep -E "^  [a-z_]+.*gemv|Duration  |Registers Per|Achieved Occupancy" $o/ncu_details.txt | cut -c1-120 | head -80
cd $OUT && tar czf results.tgz r && rm -rf r

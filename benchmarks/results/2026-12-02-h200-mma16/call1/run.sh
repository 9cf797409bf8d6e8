#!/usr/bin/env bash
# 2026-12-02, call 1: why the tensor-core GEMV costs more at 9-16 tokens than at 8. Build; Nsight
# Compute on single launches (ncu_mma.py: M = 8 / 16, and M = 8 padded to two column tiles);
# the chained kernel benchmark at 8, 12 and 16 tokens, PDL on and off; one archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
d=benchmarks/results/2026-12-02-h200-mma16/call1
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 150 ncu --clock-control none -k regex:gemv --section SpeedOfLight --section Occupancy --section LaunchStats \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats -o $o/mma python3 $d/ncu_mma.py > $o/ncu.log 2>&1
echo "ncu rc=$? in $((SECONDS-t0)) s"; tail -3 $o/ncu.log
ncu -i $o/mma.ncu-rep --page details > $o/ncu_details.txt 2>&1; grep -E "Duration|Registers Per|Achieved Occupancy|gemv" $o/ncu_details.txt | head -80
t0=$SECONDS; timeout 150 python3 benchmarks/bench_decode_kernels.py --configs SmolLM2-135M Llama-3.2-1B --tokens 8 12 16 --replays 20 \
  --out $o/decode_kernels.json > $o/decode_kernels.log 2>&1; echo "kernels rc=$? in $((SECONDS-t0)) s"; sed -n '/per call/,/layer stack/p' $o/decode_kernels.log
t0=$SECONDS; VGRAPH_PDL=0 timeout 120 python3 benchmarks/bench_decode_kernels.py --configs SmolLM2-135M --tokens 8 16 --replays 20 \
  --out $o/decode_kernels_nopdl.json > $o/decode_kernels_nopdl.log 2>&1; echo "kernels nopdl rc=$? in $((SECONDS-t0)) s"; sed -n '/per call/,/layer stack/p' $o/decode_kernels_nopdl.log
cd $OUT && tar czf results.tgz r && rm -rf r

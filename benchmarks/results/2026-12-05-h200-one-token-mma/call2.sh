#!/usr/bin/env bash
# 2026-12-05 (twenty-ninth pass), call 2, on the machine call 1 left warm: Llama-3.2-1B's O
# projection alone on the tensor-core GEMV at one token. Run with the table entry
# {Epilogue::kAddResidual, 2048, 2048, 16, 4} changed to mma_from 1 in csrc/decode_cuda.cu (not
# committed); VGRAPH_GEMV_MMA_FROM_RESIDUAL=4 gives the committed table at one token (the down
# projection's mma_from of 2 does not apply there). About 50 s.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD; o=$OUT/r; mkdir -p $o
python3 -m vgraph.ext_build > $o/build.log 2>&1; tail -1 $o/build.log
VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 100 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/ab \
  --models Llama-3.2-1B --variants fused env:VGRAPH_GEMV_MMA_FROM_RESIDUAL=4 \
  -- --modes FULL --num-iters 400 --batch-sizes 1 > $o/ab.log 2>&1
grep -A4 "^decode step, median" $o/ab.log | grep "B="
python3 benchmarks/results/2026-12-04-h200-head-greedy/call1/layer.py $o/ab/latency_*.json
cd $OUT && tar czf results.tgz r

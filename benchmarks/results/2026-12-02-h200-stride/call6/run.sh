#!/usr/bin/env bash
# 2026-12-02, call 6: the final tree (tests/e2e/test_graph_modes.py pinned to the CPU, as its
# recorder tests are meant). Build; FULL_AND_PIECEWISE and PIECEWISE against NONE on CUDA
# (tests/gpu/test_piecewise_gpu.py: FULL graphs around compiled pieces, with the input copy as
# their first node), the graph-mode file; a second round of the decode step, fused against
# copy_outside in turns. One archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 60 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --variants fused copy_outside \
  --out-dir $o/ab -- --modes FULL --batch-sizes 1 4 8 16 --no-kernel-profile > $o/ab.log 2>&1; echo "ab rc=$? in $((SECONDS-t0)) s"; grep -A4 "variants timed in turns" $o/ab.log | tail -4
t0=$SECONDS; timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_piecewise_gpu.py tests/e2e/test_graph_modes.py \
  > $o/tests.log 2>&1; echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -5
cd $OUT/r && tar czf ab.tgz ab && rm -rf ab; cd $OUT && tar czf results.tgz r && rm -rf r

#!/usr/bin/env bash
# 2026-12-01 (evening), call 2: the libstdc++ link facts, then the GPU tests in the
# two selections that fit the call (run_gpu.sh's, and the decode/graph/cascade files of call 4).
o=/tmp/res; mkdir -p $o
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> $o/env.txt
git log --oneline -1 >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
(for f in /usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.so /usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.a; do
   ls -l $f; echo "resolves to: $(readlink -f $f)"; test -e $f && echo exists || echo "does not exist"; done
 file /usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.so; ls -l /usr/lib/x86_64-linux-gnu/libstdc++*
 python3 -c "import os; p='/usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.so'; print('python exists:', os.path.exists(p), os.path.lexists(p))"
 echo "CXX=${CXX:-unset}"; which c++; c++ -print-file-name=libstdc++.so) > $o/link2.log 2>&1; cat $o/link2.log
STEPS="ext" bash benchmarks/run_gpu.sh $o > /dev/null; tail -1 $o/run.log
STEPS="tests" TEST_TIMEOUT=200 bash benchmarks/run_gpu.sh $o | tail -3
grep -E "FAILED|ERROR" $o/run.log | head
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_paged_attention.py \
  tests/kernels/test_decode_model.py tests/kernels/test_reshape_and_cache.py tests/kernels/test_cascade_attention.py \
  tests/kernels/test_ext_link.py tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py \
  tests/gpu/test_piecewise_gpu.py tests/gpu/test_cascade_gpu.py tests/gpu/test_graph_pool_gpu.py \
  -k "cuda or gpu or Cuda or full or graph or transformers or equal or real or replay or capture or identity or rejected or together or link or runtime" \
  > $o/tests_decode.log 2>&1; echo "decode tests rc=$?"; tail -1 $o/tests_decode.log; grep FAILED $o/tests_decode.log | head
tar czf $OUT/res.tgz -C $o .

#!/usr/bin/env bash
# 2026-12-01 (evening), call 1: committed decode path + the shared-libstdc++ link. Link
# diagnosis, the rejected-argument tests (own pytest runs: a crash must not end the rest), the GPU
# tests, the in-turn A/B, the profile, serve. All results in one tarball.
o=/tmp/res; mkdir -p $o
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> $o/env.txt
git log --oneline -1 >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
(echo "c++ -print-file-name=libstdc++.so: $(c++ -print-file-name=libstdc++.so)"
 echo "c++ -print-file-name=libstdc++.a: $(c++ -print-file-name=libstdc++.a)"; c++ --version | head -1) > $o/link.log
STEPS="ext" bash benchmarks/run_gpu.sh $o > /dev/null; tail -1 $o/run.log
(grep "^ldflags" build/ext/cuda/build.ninja; readelf -d vgraph/_C.so | grep NEEDED
 echo "defined C++ runtime symbols: $(nm -D --defined-only vgraph/_C.so | grep -c '__cxa_throw\|_Unwind_RaiseException\|__gxx_personality')") >> $o/link.log 2>&1
cat $o/link.log
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_ext_link.py tests/kernels/test_decode_ops.py \
  -k "bad_arguments or ext_link or runtime" > $o/rejected_tests.log 2>&1; echo "rejected-args tests rc=$?"; tail -1 $o/rejected_tests.log
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_cascade_attention.py tests/kernels/test_layer_ops.py \
  tests/kernels/test_paged_attention.py -k "rejected or together" > $o/rejected_tests2.log 2>&1; echo "rejected 2 rc=$?"; tail -1 $o/rejected_tests2.log
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu tests/kernels \
  -k "cuda or gpu or Cuda or full or graph or transformers or equal or real or replay or capture or identity" \
  > $o/tests.log 2>&1; echo "tests rc=$?"; tail -1 $o/tests.log; grep FAILED $o/tests.log | head
timeout 160 python3 benchmarks/bench_decode_step_ab.py --models SmolLM2-135M Llama-3.2-1B --out-dir $o/ab_ctx128 \
  -- --modes FULL --batch-sizes 1 4 16 > $o/ab_ctx128.log 2>&1; echo "ab128 rc=$?"; grep -A7 "variants timed in turns" $o/ab_ctx128.log
grep " kernels " $o/ab_ctx128.log | grep decode_1
timeout 80 python3 tools/profile_step.py --model SmolLM2-135M --batch 1 --modes FULL --mixed "" \
  --out $o/profile_SmolLM2-135M_b1.json > $o/profile.log 2>&1; echo "profile rc=$?"; grep "stages" $o/profile.log
STEPS="serve" bash benchmarks/run_gpu.sh $o | grep -i "tpot"
tar czf $OUT/res.tgz -C $o .

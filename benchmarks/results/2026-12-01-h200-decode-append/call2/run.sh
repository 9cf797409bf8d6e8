#!/usr/bin/env bash
# 2026-12-01 (afternoon), call 2: tests, attention partition sweep, decode-step A/B,
# step profile, serve; everything lands in one tarball.
o=/tmp/res; mkdir -p $o
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
STEPS="ext" bash benchmarks/run_gpu.sh $o > /dev/null; tail -1 $o/run.log
# 1. why a rejected argument ends the process: unwind tables of the objects, then a bad CPU call
# and a bad CUDA call of the CUDA build, each in its own process
(for f in build/ext/cuda/*.o vgraph/_C.so; do echo "$f: $(readelf -S $f | grep -c eh_frame) eh_frame sections"; done
 g++ --version | head -1; ldd vgraph/_C.so | grep -i "gcc\|stdc"
 for dev in cpu cuda; do python3 -X faulthandler -c "
import torch; from vgraph._ext import load_ext; load_ext()
x = torch.randn(4, 576, device='$dev', dtype=torch.bfloat16); w = torch.randn(3072, 576, device='$dev', dtype=torch.bfloat16)
try: torch.ops.vgraph_C.linear_out(torch.empty(4, 4096, device='$dev'), x, w)
except RuntimeError as e: print('$dev raised:', str(e).splitlines()[0])
" 2>&1 | head -12; echo "$dev rc=${PIPESTATUS[0]}"; done) > $o/segv_diag.log 2>&1; cat $o/segv_diag.log | head -40
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_paged_attention.py \
  tests/kernels/test_decode_ops.py tests/kernels/test_decode_model.py tests/kernels/test_reshape_and_cache.py \
  tests/kernels/test_cascade_attention.py tests/gpu/test_fused_decode_gpu.py tests/gpu/test_engine_gpu.py \
  tests/gpu/test_piecewise_gpu.py tests/gpu/test_cascade_gpu.py tests/gpu/test_graph_pool_gpu.py \
  -k "(cuda or gpu or Cuda or full or graph or transformers or equal or real or replay or capture) and not bad_arguments and not bad_prefix" \
  > $o/tests.log 2>&1; echo "tests rc=$?"; tail -4 $o/tests.log
for c in 64 256 512; do VGRAPH_ATTN_MIN_CHUNK=$c timeout 100 python3 benchmarks/bench_paged_attention.py --no-flashinfer \
  --batches 1 8 32 128 --contexts 128 512 2048 8192 --replays 30 --out $o/paged_attention_chunk$c.json > $o/paged_attention_chunk$c.log 2>&1
  echo "chunk $c rc=$?"; done
for cc in 256:128 64:1024 256:1024; do c=${cc%:*}; ctx=${cc#*:}; VGRAPH_ATTN_MIN_CHUNK=$c timeout 150 python3 benchmarks/bench_decode_step_ab.py \
  --models SmolLM2-135M Llama-3.2-1B --variants fused no_append --out-dir $o/ab_c${c}_ctx$ctx -- --modes FULL \
  --batch-sizes 1 4 16 --context-len $ctx --no-kernel-profile > $o/ab_c${c}_ctx$ctx.log 2>&1; echo "ab chunk $c ctx $ctx rc=$?"
  grep -A5 "decode step, median" $o/ab_c${c}_ctx$ctx.log; done
VGRAPH_ATTN_MIN_CHUNK=256 timeout 100 python3 tools/profile_step.py --model SmolLM2-135M --batch 1 \
  --modes FULL --mixed "" --out $o/profile_SmolLM2-135M_b1.json > $o/profile.log 2>&1; echo "profile rc=$?"
grep "stages" $o/profile.log
VGRAPH_ATTN_MIN_CHUNK=256 STEPS="serve" bash benchmarks/run_gpu.sh $o | grep -i "tpot\|itl"
tar czf $OUT/res.tgz -C $o .

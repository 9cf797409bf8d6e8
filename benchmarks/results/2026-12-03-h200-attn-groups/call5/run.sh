#!/usr/bin/env bash
# 2026-12-03 (sixth pass), call 5: argmax_rows cuts a row over a cluster only while the rows' CTAs
# fit one per SM (else one CTA a row), and the sampler takes the kernel at every vocabulary.
# Builds csrc; the argmax kernel tests and the sampler's on CUDA; the per-call benchmark. One
# archive.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/env.txt
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; tail -3 $o/build.log | grep -i error
t0=$SECONDS; timeout 40 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_argmax_rows.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests.log; grep -E "^FAILED|^ERROR" $o/tests.log | head -8
t0=$SECONDS; timeout 30 python3 benchmarks/bench_greedy.py --batches 1 16 64 --out $o/greedy.json > $o/greedy.log 2>&1
echo "greedy bench rc=$? in $((SECONDS-t0)) s"; grep -E "^(model|SmolLM2|Llama|Qwen3)" $o/greedy.log
cd $OUT && tar czf results.tgz r && rm -rf r

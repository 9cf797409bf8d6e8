#!/usr/bin/env bash
# 2026-12-04, call 6 (run as one command line): the engine loop's batch-1 step at 128 and 256
# positions of context, for serving's Qwen3-0.6B TPOT (call 1) against a step at serving's mean
# context. Both runs stopped at start-up: the engines' KV cache had 22 blocks, 26 needed.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
for c in 128 256; do
  VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 120 python3 benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B Qwen3-0.6B \
    --batch-sizes 1 --capture-sizes 1 2 4 8 16 --rounds 5 --context-len $c --out $OUT/async_ctx$c.json > $OUT/async_ctx$c.log 2>&1
  echo "context $c rc=$?"; grep -A4 "^model" $OUT/async_ctx$c.log
done

#!/usr/bin/env bash
# 2026-12-02 (fourth pass), call 4: the async GPU test file as committed (the three architectures
# in-process with greedy and seeded sampling; the default engine in its own process, greedy),
# after call 3's probe found seeded sampling reproducible in-process for sync and async alike.
o=$OUT/r; mkdir -p $o
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; timeout 80 python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"
t0=$SECONDS; timeout 200 python3 -m pytest -v -p no:cacheprovider tests/gpu/test_async_scheduling_gpu.py > $o/tests.log 2>&1
echo "tests rc=$? in $((SECONDS-t0)) s"; grep -E "PASSED|FAILED|ERROR|passed|failed" $o/tests.log | tail -6
cd $OUT && tar czf results.tgz r && rm -rf r

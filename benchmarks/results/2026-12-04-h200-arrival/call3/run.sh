#!/usr/bin/env bash
# 2026-12-04, call 3: the O / gate-up kernel with each CTA arriving on the counter (not rank 0 of
# each cluster after the cluster barrier); its tests; SmolLM2-135M's batch-1 decode step in turns
# against the two kernels (ogu_off), 4 and 16 clusters, and the next kernel let in at its end.
o=$OUT/r; mkdir -p $o
exec > >(tee $o/summary.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
t0=$SECONDS; python3 -m vgraph.ext_build > $o/build.log 2>&1; echo "build rc=$? in $((SECONDS-t0)) s"; grep -i -m5 "error" $o/build.log
t0=$SECONDS; timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_decode_ops.py -k "o_gate_up or compile or chain" > $o/tests_ops.log 2>&1
echo "op tests rc=$? in $((SECONDS-t0)) s"; tail -1 $o/tests_ops.log; grep -E "^FAILED|^ERROR" $o/tests_ops.log | head -8
t0=$SECONDS; VGRAPH_ENABLE_MULTIPROCESSING=0 timeout 150 python3 benchmarks/bench_decode_step_ab.py --out-dir $o/smol --models SmolLM2-135M \
  --variants fused ogu_off ogu_c4 ogu_c16 ogu_late -- --modes FULL --num-iters 300 --batch-sizes 1 > $o/smol.log 2>&1
echo "smol A/B rc=$? in $((SECONDS-t0)) s"; grep -A6 "^decode step, median" $o/smol.log; grep -E "decode_1 " $o/smol.log | cut -c1-220
python3 - $o/smol/latency_SmolLM2-135M.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    k = r.get("kernels", {}).get("decode_1")
    if not k: continue
    fam = ", ".join(f"{n}: {v['kernels']:.0f} k {v['wall_us']:.1f} us" for n, v in k["families"].items())
    print(f"{r['variant']:10s} {r['decode_ms']['1']:.3f} ms  kernels {k['kernels_per_step']:.0f} busy {k.get('busy_us_per_step', 0):.1f} us | {fam}")
PY
cd $OUT && tar czf results.tgz r && rm -rf r

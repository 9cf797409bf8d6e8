"""Per-layer kernel times of `vgraph bench step` JSON files: for each variant and decode step, the
median kernel time (us) and exclusive wall time (wall_us) of each kernel position in a layer."""

import json
import statistics as st
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        data = json.load(f)
    for r in data["results"]:
        for step, k in r["kernels"].items():
            if not step.startswith("decode"):
                continue
            seq = k["sequence"]
            # a layer starts at each attention kernel's predecessor: find the period
            att = [i for i, s in enumerate(seq) if "attention" in s["name"]]
            period = att[1] - att[0]
            first = att[0] - 1
            body = seq[first : first + period * len(att)]
            cols = []
            for j in range(period):
                items = body[j::period]
                name = items[0]["name"].split("<")[0].split("::")[-1][:16]
                us = st.median(s["us"] for s in items)
                wall = st.median(s["wall_us"] for s in items)
                cols.append(f"{name} {us:.1f}/{wall:.1f}")
            busy = k["busy_us_per_step"]
            print(f"{r['variant']:18s} {step:10s} busy {busy:7.1f} | " + " | ".join(cols))

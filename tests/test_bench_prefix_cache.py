"""benchmarks/bench_prefix_cache.py runs on the CPU (its decode section, on a tiny model): rows
for every prefix length x request count, and the switch point reported."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_prefix_cache.py"


def test_decode_section_on_a_tiny_model(tiny_checkpoint):
    spec = importlib.util.spec_from_file_location("bench_prefix_cache", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = argparse.Namespace(
        model=str(tiny_checkpoint("llama")),
        load_format="auto",
        prefix_lens=[32, 48],
        num_reqs=[2],
        num_iters=2,
        mode="NONE",
    )
    report = bench.bench_decode(args)
    assert [(r["prefix_len"], r["num_reqs"]) for r in report["rows"]] == [(32, 2), (48, 2)]
    assert all(r["off_ms"] > 0 and r["on_ms"] > 0 for r in report["rows"])
    assert set(report["switch"]) == {"min_prefix_tokens", "min_num_reqs"}
    # NONE mode: cascade steps are not fallbacks from FULL
    assert report["cascade_fallback_steps"] == 0

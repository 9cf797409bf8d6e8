"""benchmarks/bench_sampling_overhead.py on the CPU with a tiny model: every variant runs on the
FULL graphs (the processors and the bitmask are outside them) and the JSON says so."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("xgrammar")
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sampling_overhead.py"


def test_sampling_overhead_bench_runs_on_graphs(tiny_checkpoint, tmp_path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("bench_sampling_overhead", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "sampling.json"
    argv = [
        *("--model", str(tiny_checkpoint("llama")), "--load-format", "auto"),
        *("--mode", "FULL_DECODE_ONLY", "--batch", "3", "--context-len", "9"),
        *("--num-outputs", "5", "--num-iters", "3", "--num-warmup", "1", "--out", str(out)),
    ]
    assert bench.cli(argv) == 0
    report = json.loads(out.read_text())
    assert [r["variant"] for r in report["results"]] == list(bench.VARIANTS)
    assert report["graphs_serve_all"] and report["graph_steps"]["FULL"] >= 4 * 4
    assert all(r["median_ms"] > 0 for r in report["results"])
    assert "worst cost" in capsys.readouterr().out

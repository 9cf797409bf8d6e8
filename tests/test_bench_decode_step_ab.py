"""benchmarks/bench_decode_step_ab.py on the CPU: variants timed in turns on a tiny model, one row
each in the JSON; an `env:` variant's switches set while its engine starts and restored after."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_decode_step_ab.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_decode_step_ab", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_env_variants_parse_and_bad_ones_are_refused(bench):
    assert bench.variant_env("env:VGRAPH_A=1,VGRAPH_B=x") == {"VGRAPH_A": "1", "VGRAPH_B": "x"}
    assert bench.variant_env("gather_off") == {"VGRAPH_GEMV_GATHER": "0"}
    assert bench.variant_env("fused") == {}
    assert bench.variant_name("env:VGRAPH_GEMV_GATHER_QKV=0") == "env:VGRAPH_GEMV_GATHER_QKV=0"
    both = "gather_off+env:VGRAPH_A=1"  # a named variant with more switches
    assert bench.variant_name(both) == both and bench.variant_base(both) == "gather_off"
    assert bench.variant_env(both) == {"VGRAPH_GEMV_GATHER": "0", "VGRAPH_A": "1"}
    assert bench.variant_base("env:VGRAPH_A=1") == ""
    bad_ones = ("bogus+env:VGRAPH_A=1", "gather_off+", "gather_off+env:PATH=/x")
    for bad in ("bogus", "env:", "env:PATH=/x", "env:VGRAPH_A", "env:VGRAPH_A=", *bad_ones):
        with pytest.raises(argparse.ArgumentTypeError, match="invalid variant"):
            bench.variant_name(bad)


def test_variants_run_in_turns_with_their_switches(bench, tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.delenv("VGRAPH_AB_PROBE", raising=False)
    seen = {}
    start_mode = bench.start_mode

    def recording_start(args, mode):  # what each engine saw while it started
        seen[len(seen)] = os.environ.get("VGRAPH_AB_PROBE")
        return start_mode(args, mode)

    monkeypatch.setattr(bench, "start_mode", recording_start)
    out = tmp_path / "ab.json"
    bench_args = (
        "--load-format auto --modes FULL --batch-sizes 1 2 --context-len 5 --max-model-len 64 "
        "--num-iters 3 --num-warmup 1 --mixed ''"
    )
    results = bench.run_model(
        str(tiny_checkpoint("llama")),
        ["fused", "env:VGRAPH_AB_PROBE=7"],
        shlex.split(bench_args),
        out,
    )
    assert seen == {0: None, 1: "7"}
    assert "VGRAPH_AB_PROBE" not in os.environ  # restored after the start
    assert [r["variant"] for r in results] == ["fused", "env:VGRAPH_AB_PROBE=7"]
    report = json.loads(out.read_text())
    assert [r["variant"] for r in report["results"]] == ["fused", "env:VGRAPH_AB_PROBE=7"]
    for r in report["results"]:
        assert r["mode"] == "FULL" and set(r["decode_ms"]) == {"1", "2"}
        assert all(v > 0 for v in r["decode_ms"].values())

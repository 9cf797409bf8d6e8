"""`vgraph bench step` on the CPU: one row per mode, JSON written, graphs really replayed."""

from __future__ import annotations

import argparse
import json
import shlex
import statistics

import pytest

from vgraph.bench.step import add_cli_args, main


def test_latency_bench_writes_json_and_uses_graphs(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VGRAPH_CACHE_DIR", str(tmp_path))  # the piecewise compile cache
    model = tiny_checkpoint("llama")
    out = tmp_path / "latency.json"
    argv = (
        f"--model {model} --load-format auto --modes NONE FULL_DECODE_ONLY PIECEWISE "
        "--batch-sizes 1 3 "
        f"--context-len 9 --mixed 2+5 --max-model-len 256 --num-iters 3 --num-warmup 1 --out {out}"
    )
    args = add_cli_args(argparse.ArgumentParser()).parse_args(argv.split())
    main(args)
    report = json.loads(out.read_text())
    assert [r["mode"] for r in report["results"]] == ["NONE", "FULL_DECODE_ONLY", "PIECEWISE"]
    none, full, piecewise = report["results"]
    assert none["runtime_modes"] == {"decode_1": "NONE", "decode_3": "NONE", "mixed": "NONE"}
    assert full["runtime_modes"]["decode_3"] == "FULL"  # 3 requests padded to the size 4 graph
    assert full["runtime_modes"]["mixed"] == "NONE"  # FULL_DECODE_ONLY: mixed steps run eager
    assert full["num_graphs"] > 0 and none["num_graphs"] == 0
    assert set(piecewise["runtime_modes"].values()) == {"PIECEWISE"}  # decodes and mixed
    assert piecewise["num_pieces"] == 3 and piecewise["compile_s"] > 0
    assert "compile_s" not in full
    assert all(v > 0 for r in report["results"] for v in r["decode_ms"].values())
    for r in report["results"]:  # every step timed num_iters times; the figures are theirs
        for step, samples in r["samples_ms"].items():
            assert len(samples) == 3 and all(0 < t < 60_000 for t in samples), (step, samples)
            q = statistics.quantiles(samples, n=10)
            assert r["percentiles_ms"][step] == [q[0], q[-1]]
        assert r["decode_ms"]["3"] == statistics.median(r["samples_ms"]["decode_3"])
        assert r["mixed_ms"] == statistics.median(r["samples_ms"]["mixed"])
    assert "torch" in report["environment"]
    assert "decode step latency" in capsys.readouterr().out


def test_a_failing_mode_is_recorded_and_the_others_still_run(tiny_checkpoint, tmp_path):
    out = tmp_path / "latency.json"
    argv = (
        f"--model {tiny_checkpoint('llama')} --load-format auto --modes BOGUS NONE "
        f"--batch-sizes 1 --context-len 4 --mixed '' --max-model-len 64 --num-iters 2 "
        f"--num-warmup 1 --out {out}"
    )
    args = add_cli_args(argparse.ArgumentParser()).parse_args(shlex.split(argv))
    with pytest.raises(SystemExit, match="BOGUS failed"):
        main(args)
    bogus, none = json.loads(out.read_text())["results"]
    assert "cudagraph_mode" in bogus["error"] and none["decode_ms"]["1"] > 0


@pytest.mark.parametrize(
    ("sizes", "match"),
    [
        ("--mixed '' --context-len 300", "--context-len 300 needs --max-model-len >= 301"),
        ("--mixed 2+400 --context-len 8", "--mixed 2\\+400: a prefill chunk of 400 tokens needs "
         "--max-model-len >= 401; got 256"),
    ],
)  # fmt: skip
def test_sizes_past_max_model_len_are_refused_before_any_engine(sizes, match, tmp_path):
    absent = tmp_path / "no-model"  # an engine would fail on it, with another error
    argv = f"--model {absent} --modes NONE --batch-sizes 1 {sizes} --max-model-len 256"
    args = add_cli_args(argparse.ArgumentParser()).parse_args(shlex.split(argv))
    with pytest.raises(SystemExit, match=f"^bench step: {match}"):
        main(args)


def test_mixed_step_with_more_decodes_than_the_largest_batch(tiny_checkpoint):
    """9 decodes + 1 prefill are 10 requests in one step: more than max(--batch-sizes)."""
    argv = (
        f"--model {tiny_checkpoint('llama')} --load-format auto --modes NONE --batch-sizes 1 "
        "--context-len 4 --mixed 9+3 --max-model-len 64 --num-iters 1 --num-warmup 0"
    )
    report = main(add_cli_args(argparse.ArgumentParser()).parse_args(argv.split()))
    (none,) = report["results"]
    assert none["mixed_ms"] > 0 and none["runtime_modes"]["mixed"] == "NONE"

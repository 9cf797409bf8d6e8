"""`vgraph bench sweep` on the CPU (graph recorder, tiny model): every candidate measured, the
recommendation swept too, JSON fields and valid PNGs; capture lists the sweep may try start and
give NONE's tokens, and lists that can't work are refused by field; a workload that can't be
read is refused naming its flag."""

from __future__ import annotations

import argparse
import json
import random

import pytest
import torch
from PIL import Image

from tests.e2e.serve_utils import free_port
from vgraph import LLM, SamplingParams
from vgraph.bench.capture_plan import MemoryModel, StepCosts
from vgraph.bench.sweep import add_cli_args, main
from vgraph.bench.workload import load_histogram
from vgraph.config import AttentionCGSupport, CompilationConfig

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_sweep_end_to_end(tiny_checkpoint, tmp_path, capsys, monkeypatch, single_thread):
    monkeypatch.setenv("VGRAPH_CACHE_DIR", str(tmp_path))  # the piecewise compile cache
    out = tmp_path / "res" / "sweep_tiny.json"
    argv = (
        f"--model {tiny_checkpoint('llama')} --load-format auto "
        "--modes FULL_DECODE_ONLY PIECEWISE --lists default 1,3 recommended --concurrency 1 3 "
        "--input-len 6 --output-len 4 --max-num-seqs 4 --max-sizes 1 --num-iters 2 "
        f"--num-warmup 1 --num-rounds 1 --out {out}"
    )
    main(add_cli_args(argparse.ArgumentParser()).parse_args(argv.split()))
    report = json.loads(out.read_text())
    assert report["workload"]["histogram"] == {"1": 3.0, "3": 3.0}  # output_len - 1 steps each
    assert report["default_sizes"] == [1, 2, 4, 8]
    by_name = {r["name"]: r for r in report["results"]}
    assert list(by_name) == [
        "NONE",
        "FULL_DECODE_ONLY:default",
        "FULL_DECODE_ONLY:1,3",
        "FULL_DECODE_ONLY:recommended",
        "FULL_DECODE_ONLY:all:4",  # 4: the default list pads the largest batch, 3, to 4
        "PIECEWISE:default",
        "PIECEWISE:1,3",
        "PIECEWISE:recommended",
        "PIECEWISE:all:4",
    ]
    assert len(by_name) == 9 and not any("error" in r for r in by_name.values())
    for r in by_name.values():
        assert set(r["step_ms"]) == {"1", "2", "3", "4"} and all(
            v > 0 for v in r["step_ms"].values()
        )
        assert set(r["e2e"]) == {"1", "3"}
        for e in r["e2e"].values():
            assert e["output_tok_s"] > 0 and e["tpot_ms"] > 0
        for key in ("startup_s", "capture_s", "graph_memory_mib", "graph_kv_blocks"):
            assert r[key] >= 0
        assert r["kv_block_bytes"] == 2 * 2 * 16 * 2 * 16 * 4  # K+V, layers, block, heads, dim
        assert r["expected_step_ms"] == pytest.approx((r["step_ms"]["1"] + r["step_ms"]["3"]) / 2)
    odd = by_name["FULL_DECODE_ONLY:1,3"]
    assert odd["capture_sizes"] == [1, 3] and odd["num_graphs"] == 2
    assert odd["step_padded"] == {"1": 1, "2": 3, "3": 3, "4": 4}
    assert odd["step_mode"] == {"1": "FULL", "2": "FULL", "3": "FULL", "4": "NONE"}
    assert odd["e2e"]["3"]["decode_pad_waste_pct"] == 0.0  # 3 requests ran the size-3 graph
    assert by_name["FULL_DECODE_ONLY:default"]["e2e"]["3"]["decode_pad_waste_pct"] > 0  # 3 -> 4
    assert by_name["NONE"]["num_graphs"] == 0
    # timing: one engine per mode captured the union of its candidates' lists ...
    assert "union of the candidates' graphs" in report["timing"]
    engines = report["timing_engines"]
    assert set(engines) == {"NONE", "FULL_DECODE_ONLY", "PIECEWISE"}
    assert engines["NONE"]["num_graphs"] == 0
    for mode, num_graphs in (("FULL_DECODE_ONLY", 4), ("PIECEWISE", 5)):
        assert engines[mode]["capture_sizes"] == [1, 2, 3, 4, 8]  # default, 1,3 and all:4
        assert engines[mode]["num_graphs"] == num_graphs  # FULL decode graphs up to 4 requests
        assert engines[mode]["num_lanes"] == 4
    # ... and each candidate ran on it at exactly its own padded sizes and modes, not the union's
    for r in by_name.values():
        graphs = [s for s in r["capture_sizes"] if r["mode"] != "NONE"]
        if r["mode"] == "FULL_DECODE_ONLY":
            graphs = [s for s in graphs if s <= 4]  # max_num_seqs
        assert r["num_graphs"] == len(graphs)  # its own engine captured its own list only
        for n in range(1, 5):
            own = min((s for s in graphs if s >= n), default=None)
            assert r["step_padded"][str(n)] == (own or n), (r["name"], n)
            assert (r["step_mode"][str(n)] == "NONE") == (own is None), (r["name"], n)
        for level in ("1", "3"):  # each round's batches were the candidate's own, unmixed
            e, own = r["e2e"][level], min((s for s in graphs if s >= int(level)), default=None)
            assert e["decode_batches"] == {level: 3}, r["name"]
            assert e["padded_decode_batches"] == {str(own or level): 3}, r["name"]
    assert by_name["FULL_DECODE_ONLY:default"]["step_padded"]["3"] == 4
    assert by_name["FULL_DECODE_ONLY:all:4"]["step_padded"]["3"] == 3
    assert by_name["PIECEWISE:all:4"]["compile_s"] > 0
    assert set(by_name["FULL_DECODE_ONLY:all:4"]["graph_memory_per_size"]) == {"1", "2", "3", "4"}
    for mode in ("FULL_DECODE_ONLY", "PIECEWISE"):
        rec = report["recommendations"][mode]
        assert rec["basis"] == f"{mode}:all:4" and len(rec["sizes"]) == 1
        # the optimiser's answer from the per-size latencies it recorded: the better one size
        costs = StepCosts(
            {1: 3.0, 3: 3.0},
            {int(s): ms for s, ms in rec["basis_graph_ms"].items()},
            {int(b): ms for b, ms in rec["basis_eager_ms"].items()},
            MemoryModel({}, 0.0),
        )
        assert rec["predicted_ms"] == min(costs.expected_ms([1]), costs.expected_ms([3]))
        assert rec["predicted_ms"] == pytest.approx(costs.expected_ms(rec["sizes"]))
        assert rec["predicted_default_ms"] == pytest.approx(costs.expected_ms([1, 2, 4, 8]))
        swept = by_name[f"{mode}:recommended"]
        assert swept["capture_sizes"] == rec["sizes"]
        assert json.loads(rec["compilation_config"]) == {
            "cudagraph_mode": mode,
            "cudagraph_capture_sizes": rec["sizes"],
        }
        assert rec["measured_ms"] == swept["expected_step_ms"]
        assert rec["measured_default_ms"] == by_name[f"{mode}:default"]["expected_step_ms"]
        for key in ("predicted_ms", "predicted_gain_pct", "measured_gain_pct"):
            assert isinstance(rec[key], float)
    assert any(r["pareto_memory"] for r in by_name.values())
    assert len(report["plots"]) == 3
    for path in report["plots"]:
        with open(path, "rb") as f:
            assert f.read(8) == PNG_SIGNATURE
        with Image.open(path) as img:
            img.verify()
        with Image.open(path) as img:
            assert img.size[0] > 600 and img.size[1] > 300
    text = capsys.readouterr().out
    assert "capture-list sweep" in text and "--compilation-config '{" in text


def test_sweep_refuses_bad_lists_before_starting_anything(tiny_checkpoint):
    base = f"--model {tiny_checkpoint('llama')} --concurrency 2 --max-num-seqs 4 --lists"
    for lists, match in (
        ("1,x", "--lists: '1,x' is not a capture list"),
        ("pow2 pow2", "--lists: pow2 given more than once"),
        ("pow2 --output-len 1", "--output-len=1 must be >= 2"),
    ):
        args = add_cli_args(argparse.ArgumentParser()).parse_args(f"{base} {lists}".split())
        with pytest.raises(SystemExit, match=match):
            main(args)
    with pytest.raises(SystemExit) as usage_error:  # a level of 0: argparse's usage error
        add_cli_args(argparse.ArgumentParser()).parse_args(f"{base} pow2 --concurrency 0 2".split())
    assert usage_error.value.code == 2
    args = add_cli_args(argparse.ArgumentParser()).parse_args(
        f"{base} pow2 --concurrency 8".split()
    )
    with pytest.raises(SystemExit, match="--max-num-seqs=4 is below the workload's batch size 8"):
        main(args)


def _workload():
    """6 requests of different lengths, finishing at different steps: batches 6 down to 1."""
    rng = random.Random(2)
    prompts = [[rng.randrange(512) for _ in range(n)] for n in (3, 17, 40, 9, 5, 21)]
    params = [
        SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in (4, 9, 14, 6, 11, 2)
    ]
    return prompts, params


def _tokens(model, **comp):
    llm = LLM(
        model,
        max_model_len=128,
        max_num_batched_tokens=32,
        multiprocess=False,
        compilation_config=comp,
    )
    outs = llm.generate(*_workload(), use_tqdm=False)
    runner = llm.engine.client.core.runner
    return [o.outputs[0].token_ids for o in outs], runner


def test_odd_capture_lists_start_and_give_none_tokens(
    tiny_checkpoint, monkeypatch, tmp_path, single_thread
):
    monkeypatch.setenv("VGRAPH_CACHE_DIR", str(tmp_path))
    model = str(tiny_checkpoint("llama"))
    ref, _ = _tokens(model, cudagraph_mode="NONE")
    for comp in (
        {"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [3]},  # one size
        {"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [5, 7, 13]},
        # sizes above max_num_batched_tokens (32) are dropped; 11 and 31 hold prefill chunks
        {
            "cudagraph_mode": "FULL_AND_PIECEWISE",
            "cudagraph_capture_sizes": [1, 7, 100000],
            "piecewise_capture_sizes": [11, 31, 4096],
        },
    ):
        got, runner = _tokens(model, **comp)
        assert got == ref, comp
        g = runner.graph_stats
        replayed = g.steps["FULL"] + g.steps["PIECEWISE"]
        assert replayed >= 3, (comp, g.steps)  # graphs really ran
        assert 100000 not in runner.dispatcher.capture_sizes
        assert set(g.graph_memory_bytes_per_size) == {
            k.num_tokens for _, k in runner.dispatcher.capture_keys()
        }


def test_lists_that_cannot_work_are_refused_by_field():
    def resolve(max_num_seqs: int = 4, max_num_batched_tokens: int = 32, **kw):
        return CompilationConfig.parse(kw).resolve(
            torch.device("cpu"),
            max_num_seqs,
            max_num_batched_tokens,
            "fake",
            AttentionCGSupport.ALWAYS,
        )

    with pytest.raises(ValueError, match="every size of cudagraph_capture_sizes=\\[8, 16\\]"):
        resolve(cudagraph_mode="FULL_DECODE_ONLY", cudagraph_capture_sizes=[8, 16])
    with pytest.raises(ValueError, match="needs at least one of cudagraph_capture_sizes"):
        resolve(cudagraph_mode="FULL_DECODE_ONLY", cudagraph_capture_sizes=[64])
    with pytest.raises(ValueError, match="needs at least one of piecewise_capture_sizes"):
        resolve(cudagraph_mode="PIECEWISE", piecewise_capture_sizes=[33])
    with pytest.raises(ValueError, match="cudagraph_capture_sizes=\\[1, -2\\]"):
        resolve(cudagraph_capture_sizes=[1, -2])
    assert resolve(
        cudagraph_mode="FULL_DECODE_ONLY", cudagraph_capture_sizes=[3, 8]
    ).cudagraph_capture_sizes == (3, 8)


def test_a_workload_that_cannot_be_read_is_refused_naming_its_flag(tmp_path):
    absent = tmp_path / "absent.json"
    url = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    for flag, source, match in (
        ("--workload-file", absent, f"--workload-file {absent}: cannot read it: .*No such file"),
        ("--workload-file", tmp_path, f"--workload-file {tmp_path}: cannot read it"),
        ("--workload-url", url, f"--workload-url {url}: ConnectError"),
    ):
        with pytest.raises(ValueError, match=match):
            load_histogram(str(source))
        args = add_cli_args(argparse.ArgumentParser()).parse_args([flag, str(source)])
        with pytest.raises(SystemExit, match=f"^bench sweep: {match}"):
            main(args)

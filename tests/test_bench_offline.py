"""`vgraph bench latency` and `vgraph bench throughput` as vLLM's: end-to-end batch latency with
numpy percentiles, and offline throughput, through the real CLI parser (EngineArgs flags)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from vgraph.entrypoints.cli import main


@pytest.fixture
def model(tiny_checkpoint, monkeypatch) -> str:
    monkeypatch.setenv("VGRAPH_ENABLE_MULTIPROCESSING", "0")
    return str(tiny_checkpoint("llama"))


def test_bench_latency(model, tmp_path, capsys) -> None:
    out = tmp_path / "latency.json"
    rc = main(
        ["bench", "latency", "--model", model, "--input-len", "8", "--output-len", "4",
         "--batch-size", "3", "--num-iters-warmup", "1", "--num-iters", "4",
         "--max-model-len", "64", "--output-json", str(out)]
    )  # fmt: skip
    assert rc == 0
    report = json.loads(out.read_text())
    assert len(report["latencies"]) == 4
    assert report["avg_latency"] == pytest.approx(np.mean(report["latencies"]))
    for p in (10, 50, 99):
        assert report["percentiles"][str(p)] == pytest.approx(np.percentile(report["latencies"], p))
    text = capsys.readouterr().out
    assert "Avg latency:" in text and "99% percentile latency:" in text


def test_bench_throughput(model, tmp_path, capsys) -> None:
    out = tmp_path / "throughput.json"
    rc = main(
        ["bench", "throughput", "--model", model, "--dataset-name", "random", "--input-len", "8",
         "--output-len", "5", "--num-prompts", "6", "--n", "2", "--max-model-len", "64",
         "--output-json", str(out)]
    )  # fmt: skip
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["num_requests"] == 6
    assert report["total_num_output_tokens"] == 6 * 2 * 5  # ignore_eos: every sample full
    assert report["total_num_tokens"] == 6 * 8 + 6 * 2 * 5
    captured = capsys.readouterr()
    assert "requests/s" in captured.out
    # LLM.generate's progress bar shows token rates, as vLLM's
    assert re.search(r"est\. speed input: [\d.]+ toks/s, output: [\d.]+ toks/s", captured.err)

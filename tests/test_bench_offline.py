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


@pytest.mark.parametrize("bench", ["latency", "throughput"])
def test_lengths_past_max_model_len_are_refused_before_loading(bench, tmp_path) -> None:
    """250 + 20 tokens cannot fit 256: the engine would stop each request at 6 tokens."""
    absent = str(tmp_path / "no-model")  # loading it would fail otherwise, with another error
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", bench, "--model", absent, "--input-len", "250", "--output-len", "20",
              "--max-model-len", "256"])  # fmt: skip
    message = str(exit_info.value.code)
    assert message.startswith(f"bench {bench}:")
    assert "--input-len 250 + --output-len 20 = 270" in message
    assert "--max-model-len 256" in message


def test_lengths_past_the_models_own_limit_are_refused_before_generating(
    tiny_checkpoint, monkeypatch, capsys
) -> None:
    """Without --max-model-len the limit is the model's (its max_position_embeddings, 64)."""
    monkeypatch.setenv("VGRAPH_ENABLE_MULTIPROCESSING", "0")
    model = str(tiny_checkpoint("llama", max_position_embeddings=64))
    with pytest.raises(SystemExit, match="more than the model's max_model_len 64"):
        main(["bench", "throughput", "--model", model, "--input-len", "60", "--output-len", "10",
              "--num-prompts", "2"])  # fmt: skip
    assert "Throughput:" not in capsys.readouterr().out  # nothing was generated

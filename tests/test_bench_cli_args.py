"""`vgraph bench` refuses bad counts and lists as a usage error naming the flag (exit 2), before
any model loads or request is sent; without a subcommand it says which exist; `bench serve` with
no server says so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.serve_utils import REPO, free_port
from vgraph.entrypoints.cli import main


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["latency", "--input-len", "0"], "--input-len"),
        (["latency", "--output-len", "-5"], "--output-len"),
        (["latency", "--n", "0"], "--n"),
        (["latency", "--batch-size", "0"], "--batch-size"),
        (["latency", "--num-iters-warmup", "-1"], "--num-iters-warmup"),
        (["throughput", "--num-prompts", "0"], "--num-prompts"),
        (["serve", "--num-prompts", "0"], "--num-prompts"),
        (["serve", "--request-rate", "0"], "--request-rate"),
        (["step", "--batch-sizes", "1", "0"], "--batch-sizes"),
        (["step", "--mixed", "x"], "--mixed"),
        (["step", "--mixed", "4+0"], "--mixed"),
        (["serve", "--metric-percentiles", "150"], "--metric-percentiles"),
        (["serve", "--metric-percentiles", "p99"], "--metric-percentiles"),
        (["serve", "--percentile-metrics", "ttft,foo"], "--percentile-metrics"),
        (["serve", "--endpoint", "/v1/embeddings"], "--endpoint"),
        (["sweep", "--num-rounds", "zero"], "--num-rounds"),
    ],
)
def test_bad_count_is_a_usage_error(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *argv])
    assert exit_info.value.code == 2
    assert f"argument {flag}:" in capsys.readouterr().err


def test_bench_without_a_subcommand_names_them(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench"])
    assert exit_info.value.code == 2
    assert "latency" in capsys.readouterr().err


def test_bench_serve_without_a_server() -> None:
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "vgraph.entrypoints.cli", "bench", "serve", "--port", str(port)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert f"no server answers at http://127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("command", "argv", "words"),
    [
        ("latency", ["--block-size", "7"], "block_size=7 is not allowed"),
        ("latency", ["--compilation-config", "{bad"], "compilation config is not valid JSON"),
        ("latency", ["--tensor-parallel-size", "2", "--async-scheduling"], "async_scheduling"),
        ("throughput", ["--block-size", "7"], "block_size=7 is not allowed"),
    ],
)
def test_bad_engine_argument_is_an_error_message(
    command: str, argv: list[str], words: str, tiny_checkpoint, capsys: pytest.CaptureFixture
) -> None:
    """As `vgraph serve` says it: `error: ...` and exit status 2, not a traceback."""
    model = str(tiny_checkpoint("llama"))
    assert main(["bench", command, "--model", model, *argv]) == 2
    err = capsys.readouterr().err
    assert f"vgraph bench {command}: error: " in err and words in err


def test_offline_benchmarks_read_vllm_spellings(tmp_path) -> None:
    """Dotted -cc./-O. keys and a --config file, as `vgraph serve` reads them (the command line
    wins over the file)."""
    from vgraph.entrypoints.cli import make_parser

    cfg = tmp_path / "bench.yaml"
    cfg.write_text("max-model-len: 2k\nenforce-eager: true\nblock-size: 32\n")
    for command in ("latency", "throughput"):
        argv = ["bench", command, "--config", str(cfg), "--block-size", "16"]
        argv += ["-cc.cudagraph_mode=FULL", "-O.mode=0"]
        ns = make_parser(argv).parse_args(argv)
        assert (ns.max_model_len, ns.enforce_eager, ns.block_size) == (2000, True, 16)
        assert ns.compilation_config == ['{"cudagraph_mode": "FULL"}', '{"mode": 0}']

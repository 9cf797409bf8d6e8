"""`vgraph bench` refuses bad counts as a usage error naming the flag (exit 2), before any model
loads; without a subcommand it says which exist; `bench serve` with no server says so."""

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

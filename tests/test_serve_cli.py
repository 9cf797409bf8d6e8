"""`vgraph serve`'s command line: a `--config` file never outvotes the command line (a list flag
such as --api-key is replaced, not merged, and a positional MODEL replaces the file's model), the
file's lists reach JSON-list flags, numeric flags are range-checked as argparse usage errors, vLLM's
human-readable integers and dotted -O. keys parse, the files that flags name are checked before the
engine core starts, and `--port 0` logs the port actually bound. Parse-level where possible; a real
server only for the port."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import httpx
import pytest

from tests.e2e.serve_utils import REPO, free_port, wait_until
from tests.tiny_models import make_tiny_model_with_tokenizer
from vgraph.entrypoints.cli import make_parser
from vgraph.entrypoints.cli_args import engine_args_from, frontend_args_from


def parse(*argv: str) -> Namespace:
    args = ["serve", *argv]
    return make_parser(args).parse_args(args)


def usage_error(capsys: pytest.CaptureFixture, *argv: str) -> str:
    """argparse's usage error (exit 2) for `vgraph serve argv`: its message."""
    with pytest.raises(SystemExit) as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_command_line_list_flags_replace_the_files(tmp_path: Path) -> None:
    cfg = tmp_path / "k.yaml"
    cfg.write_text(
        "api_key: oldkey\ncompilation-config: {cudagraph_mode: PIECEWISE}\n"
        "served-model-name: [a, b]\nport: 9001\n"
    )
    ns = parse("--config", str(cfg), "--api-key", "newkey", "-cc.max_cudagraph_capture_size=8")
    assert frontend_args_from(ns).api_key == ["newkey"]  # the file's key no longer works
    assert engine_args_from(ns).compilation_config == {"max_cudagraph_capture_size": 8}
    assert ns.served_model_name == ["a", "b"] and ns.port == 9001  # what the line leaves alone
    ns = parse("--config", str(cfg), "--api-key", "k1", "--api-key", "k2", "--port", "8000")
    assert ns.api_key == ["k1", "k2"] and ns.port == 8000  # the line's own lists still add up
    assert parse("--config", str(cfg)).api_key == ["oldkey"]


def test_positional_model_replaces_the_files_model(tmp_path: Path) -> None:
    cfg = tmp_path / "m.yaml"
    cfg.write_text("model: SmolLM2-135M\napi-key: [k1]\n")
    for argv in (["Qwen3-0.6B", "--config", str(cfg)], ["--config", str(cfg), "Qwen3-0.6B"]):
        ns = parse(*argv)
        assert engine_args_from(ns).model == "Qwen3-0.6B" and ns.api_key == ["k1"]
    assert engine_args_from(parse("--config", str(cfg))).model == "SmolLM2-135M"
    assert engine_args_from(parse("--config", str(cfg), "--model", "m2")).model == "m2"
    with pytest.raises(ValueError, match="model given twice"):  # both on the command line
        engine_args_from(parse("a/b", "--model", "c/d", "--config", str(cfg)))


def test_yaml_lists_fill_json_list_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "cors.yaml"
    cfg.write_text('allowed_origins: ["*"]\nallowed-methods: [GET, POST]\n')
    ns = parse("--config", str(cfg))
    assert (ns.allowed_origins, ns.allowed_methods) == (["*"], ["GET", "POST"])


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--port", "99999", "use 0..65535"),
        ("--port", "-1", "use 0..65535"),
        ("--max-request-body-bytes", "-1", "use an integer >= 1"),
        ("--max-request-body-bytes", "0", "use an integer >= 1"),
        ("--engine-death-grace", "-1", "use a number of seconds >= 0"),
        ("--graceful-shutdown-timeout", "-0.5", "use a number of seconds >= 0"),
        ("--graceful-shutdown-timeout", "nan", "use a number of seconds >= 0"),
        ("--max-model-len", "1.5K", "did you mean 1.5k?"),
    ],
)
def test_out_of_range_value_is_a_usage_error(capsys, flag: str, value: str, words: str) -> None:
    assert f"argument {flag}: " in (err := usage_error(capsys, flag, value)) and words in err


def test_range_checked_values_that_are_allowed() -> None:
    ns = parse("--port", "0", "--engine-death-grace", "0", "--graceful-shutdown-timeout", "2.5")
    assert (ns.port, ns.engine_death_grace, ns.graceful_shutdown_timeout) == (0, 0.0, 2.5)
    assert parse("--port", "65535", "--max-request-body-bytes", "1").port == 65535


@pytest.mark.parametrize(
    ("text", "value"),
    [("2048", 2048), ("1k", 1000), ("1K", 1024), ("25.6k", 25600), ("1m", 10**6), ("1M", 2**20)],
)
def test_human_readable_ints_as_vllm(text: str, value: int) -> None:
    ea = engine_args_from(parse("--max-model-len", text, "--max-num-batched-tokens", text))
    assert ea.max_model_len == value and ea.max_num_batched_tokens == value


def test_dotted_optimization_keys_are_compilation_config() -> None:
    """vLLM's docs (debug_vllm_compile) spell compilation keys -O.KEY=VALUE; -O N is the level."""
    ea = engine_args_from(parse("-O.mode=0", "-O.cudagraph_mode", "NONE", "-O.backend=eager"))
    assert ea.compilation_config == {"mode": 0, "cudagraph_mode": "NONE", "backend": "eager"}
    assert ea.optimization_level is None
    assert engine_args_from(parse("-O1")).optimization_level == 1


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--chat-template", "/nonexistent.jinja", "chat_template='/nonexistent.jinja'"),
        ("--generation-config", "/nonexistent", "generation_config='/nonexistent'"),
    ],
)
def test_named_files_are_checked_before_the_model(flag: str, value: str, words: str) -> None:
    """The model does not exist either: the file's error proves nothing was loaded first."""
    cmd = [sys.executable, "-m", "vgraph.entrypoints.cli", "serve", "/nonexistent/model"]
    cmd += ["--port", str(free_port()), flag, value]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert "/nonexistent/model" not in done.stderr.split("error:", 1)[1]
    assert "Traceback" not in done.stderr


def test_port_zero_logs_the_port_it_serves_on(tmp_path: Path) -> None:
    model = make_tiny_model_with_tokenizer(tmp_path / "model")
    log_path = tmp_path / "server.log"
    cmd = [sys.executable, "-m", "vgraph.entrypoints.cli", "serve", str(model), "--port", "0"]
    cmd += ["--max-model-len", "64", "--num-gpu-blocks-override", "64", "--disable-log-stats"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:

        def serving_port() -> str | None:
            assert proc.poll() is None, log_path.read_text()
            found = re.search(r"serving \S+ on http://127\.0\.0\.1:(\d+)", log_path.read_text())
            return found.group(1) if found else None

        port = int(wait_until(serving_port, 180, "the `serving ... on` line", interval=0.2))
        assert port != 0

        def health() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(health, 30, f"/health on the logged port {port}", interval=0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

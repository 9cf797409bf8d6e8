"""`vgraph serve` as a process: --help, a malformed --compilation-config, --api-key, graceful
SIGTERM (in-flight requests finish, nothing left behind), SIGKILL of the engine core (errors within
5 s, /health 503), then SIGINT (nothing left behind either)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.serve_utils import (
    REPO,
    ServerProcess,
    children_of,
    pid_alive,
    wait_until,
)
from tests.e2e.test_serve_openai import metric
from vgraph.attention.selector import backend_names

ISSUE_FLAGS = [
    "--compilation-config",
    "--enforce-eager",
    "--host",
    "--port",
    "--api-key",
    "--served-model-name",
    "--max-num-seqs",
    "--max-model-len",
    "--max-num-batched-tokens",
    "--attention-backend",
    "--load-format",
    "--dtype",
    "--seed",
]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vgraph.entrypoints.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_serve_help_documents_every_flag() -> None:
    out = cli("serve", "--help")
    assert out.returncode == 0
    for flag in ISSUE_FLAGS:
        assert flag in out.stdout, flag
    assert "VGRAPH_API_KEY" in out.stdout and "127.0.0.1" in out.stdout
    # the attention backends offered are exactly those the selector knows
    assert f"auto or one of {', '.join(backend_names())} " in " ".join(out.stdout.split())


def test_top_level_help_does_not_import_torch() -> None:
    """`import vgraph` is light: its public names load on first use."""
    code = (
        "import sys, vgraph.entrypoints.cli as cli; cli.make_parser(['serve']); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr
    code = "import vgraph; print(vgraph.SamplingParams.__name__, vgraph.LLM.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.split() == ["SamplingParams", "vgraph.entrypoints.llm"], out.stderr


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("{bad json", "not valid JSON"),
        ('{"cudagraph_mdoe": "FULL"}', "cudagraph_mdoe"),
    ],
)
def test_malformed_compilation_config_exits_before_loading(value: str, words: str) -> None:
    # the model folder does not exist: the config error must come first
    out = cli("serve", "/no/such/model", "--compilation-config", value)
    assert out.returncode == 2
    assert words in out.stderr and "compilation config" in out.stderr
    assert "/no/such/model" not in out.stderr


def test_api_key_then_graceful_sigterm(serve_model_dir: Path, tmp_path: Path) -> None:
    srv = ServerProcess(
        serve_model_dir,
        tmp_path,
        "--api-key",
        "s3cret",
        "--served-model-name",
        "tiny",
        "--root-path",
        "/api",
    )
    try:
        srv.wait_healthy()
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            # the routes answer under the root path too (a proxy's prefix): guarded there too
            for prefix in ("", "/api"):
                resp = httpx.get(f"{srv.url}{prefix}/v1/models", headers=headers)
                assert resp.status_code == 401, (prefix, headers)
                assert resp.json()["error"]["code"] == "invalid_api_key"
        auth = {"Authorization": "Bearer s3cret"}
        assert httpx.get(f"{srv.url}/api/v1/models", headers=auth).status_code == 200
        # without the key, no /v1 path says whether it exists (nor which methods it takes)
        for method, path in [("GET", "/v1/nope"), ("POST", "/v1/admin/x"), ("GET", "/v1")]:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                resp = httpx.request(method, f"{srv.url}{path}", headers=headers)
                assert resp.status_code == 401, (method, path, headers)
                assert resp.json()["error"]["code"] == "invalid_api_key"
        resp = httpx.get(f"{srv.url}/v1/nope", headers={"Authorization": "Bearer s3cret"})
        assert resp.status_code == 404 and resp.json()["error"]["message"]
        assert httpx.get(f"{srv.url}/health").status_code == 200  # outside /v1: no key
        bad = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model="tiny", prompt="hi", max_tokens=2)
        good = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="s3cret", max_retries=0)
        assert good.models.list().data[0].id == "tiny"
        assert good.completions.create(model="tiny", prompt="hi", max_tokens=2).choices

        kids = children_of(srv.proc.pid)
        assert kids  # the engine core (and multiprocessing's resource tracker)
        body = {
            "model": "tiny",
            "prompt": "Once upon a time",
            "max_tokens": 60,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        headers = {"Authorization": "Bearer s3cret"}
        with httpx.stream(
            "POST", f"{srv.url}/v1/completions", json=body, headers=headers, timeout=60
        ) as resp:
            lines = resp.iter_lines()
            events = [next(line for line in lines if line.startswith("data: "))]
            srv.proc.send_signal(signal.SIGTERM)  # mid-stream
            events += [line for line in lines if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"  # the in-flight request was allowed to finish
        assert json.loads(events[-2][len("data: ") :])["usage"]["completion_tokens"] == 60
        assert srv.proc.wait(60) == 0
        wait_until(lambda: not any(pid_alive(p) for p in kids), 10, "the children to exit")
        assert not list(srv.tmpdir.glob("vgraph-*"))  # the IPC folder is gone
    finally:
        srv.stop()


async def _stream_until_error(client: openai.AsyncOpenAI, started: asyncio.Event) -> float:
    stream = await client.completions.create(
        model="tiny-serve",
        prompt="Once",
        max_tokens=240,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    try:
        async for _ in stream:
            started.set()
    except openai.APIError:
        return time.monotonic()
    raise AssertionError("the stream ended without an error")


async def _kill_during_generation(srv: ServerProcess) -> None:
    http = httpx.AsyncClient(timeout=60)
    client = openai.AsyncOpenAI(
        base_url=f"{srv.url}/v1", api_key="x", max_retries=0, http_client=http
    )
    started = [asyncio.Event() for _ in range(3)]
    streams = [asyncio.create_task(_stream_until_error(client, e)) for e in started]
    plain = asyncio.create_task(
        http.post(
            f"{srv.url}/v1/completions",
            json={"prompt": "Twice", "max_tokens": 240, "ignore_eos": True},
        )
    )
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 60)
    killed = time.monotonic()
    os.kill(srv.engine_pid(), signal.SIGKILL)
    ended = await asyncio.wait_for(asyncio.gather(*streams), 10)
    resp = await asyncio.wait_for(plain, 10)
    assert max(ended) - killed < 5
    assert resp.status_code == 503 and resp.json()["error"]["code"] == "engine_dead"
    await http.aclose()


def test_engine_sigkill_fails_requests_fast(serve_model_dir: Path, tmp_path: Path) -> None:
    srv = ServerProcess(
        serve_model_dir, tmp_path, "--served-model-name", "tiny-serve", "--engine-death-grace", "20"
    )
    try:
        srv.wait_healthy()
        asyncio.run(_kill_during_generation(srv))
        assert srv.health() == 503
        assert metric(srv, "engine_dead") == 1.0
        resp = httpx.post(
            f"{srv.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
        )
        assert resp.status_code == 503 and resp.json()["error"]["type"]
        kids = children_of(srv.proc.pid)
        # a server without its engine exits on its own, with a non-zero status
        assert wait_until(lambda: srv.proc.poll() is not None, 60, "the server to exit")
        assert srv.proc.returncode == 1
        wait_until(lambda: not any(pid_alive(p) for p in kids), 10, "the children to exit")
        assert not list(srv.tmpdir.glob("vgraph-*"))
    finally:
        srv.stop()

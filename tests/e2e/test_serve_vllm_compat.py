"""`vgraph serve` with vLLM's flags, on a real server: several served names and API keys,
request logging, the start-up log of the resolved config, the periodic stats line, vLLM's
per-request histograms on /metrics, the port bound before the model loads, one X-Request-Id
on concurrent and retried requests, and null for the fields that have defaults."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.e2e.serve_utils import REPO, ServerProcess, free_port, wait_until

KEYS = ("key-one", "key-two")


@pytest.fixture(scope="module")
def srv(serve_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(
        serve_model_dir,
        tmp_path_factory.mktemp("vllm-compat"),
        "--served-model-name",
        "tiny",
        "tiny-alias",
        "--api-key",
        KEYS[0],
        "--api-key",
        KEYS[1],
        "--enable-log-requests",
        env={"VGRAPH_LOG_STATS_INTERVAL": "0.2"},
    )
    try:
        s.wait_healthy()
        yield s
    finally:
        s.stop()


def complete(srv: ServerProcess, key: str, model: str, max_tokens: int = 8) -> httpx.Response:
    return httpx.post(
        f"{srv.url}/v1/completions",
        json={
            "model": model,
            "prompt": "Hello there",
            "max_tokens": max_tokens,
            "ignore_eos": True,
        },
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def test_every_key_and_every_served_name_works(srv: ServerProcess) -> None:
    for key, name in zip(KEYS, ("tiny", "tiny-alias")):
        r = complete(srv, key, name)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "tiny"  # responses carry the first name, as vLLM
    assert complete(srv, "wrong", "tiny").status_code == 401
    assert complete(srv, KEYS[0], "other").status_code == 404
    models = httpx.get(f"{srv.url}/v1/models", headers={"Authorization": f"Bearer {KEYS[1]}"})
    assert [m["id"] for m in models.json()["data"]] == ["tiny", "tiny-alias"]
    for name, status in (("tiny", 200), ("tiny-alias", 200), ("other", 404)):
        tokens = httpx.post(
            f"{srv.url}/tokenize",
            json={"model": name, "prompt": "Hello"},
            headers={"Authorization": f"Bearer {KEYS[0]}"},
        )
        assert tokens.status_code == status, tokens.text


def test_startup_log_and_request_log(srv: ServerProcess) -> None:
    assert complete(srv, KEYS[0], "tiny").status_code == 200
    log = srv.log()
    assert "non-default args:" in log and "'served_model_name': ['tiny', 'tiny-alias']" in log
    resolved = re.search(r"resolved config: .*", log)
    assert resolved is not None, log
    for words in (
        "cudagraph_mode NONE",
        "max_model_len 256",
        "KV cache 2048 blocks",
        "async scheduling off",  # the CPU default
    ):
        assert words in resolved.group(0)
    assert re.search(r"request cmpl-\w+-\w{8}-0: \d+ prompt tokens, params ", log), log
    assert KEYS[0] not in log and KEYS[1] not in log  # keys are never logged


def test_stats_line_while_busy(srv: ServerProcess) -> None:
    assert complete(srv, KEYS[0], "tiny", max_tokens=32).status_code == 200

    def busy_line() -> re.Match[str] | None:
        return re.search(
            r"Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: ([\d.]+) "
            r"tokens/s, Running: \d+ reqs, Waiting: \d+ reqs, KV cache usage: [\d.]+%, "
            r"Prefix cache hit rate: [\d.]+%, Graph replay: [\d.]+% of \d+ steps",
            srv.log(),
        )

    line = wait_until(busy_line, 30, "a stats line")
    assert float(line.group(1)) > 0


def test_vllm_histograms_after_real_requests(srv: ServerProcess) -> None:
    for _ in range(2):
        assert complete(srv, KEYS[0], "tiny", max_tokens=5).status_code == 200
    text = httpx.get(f"{srv.url}/metrics").text

    def value(series: str) -> float:
        m = re.search(rf'^{re.escape(series)}\{{model_name="tiny"\}} (\S+)$', text, re.M)
        assert m is not None, series
        return float(m.group(1))

    for phase in ("queue", "prefill", "decode", "inference"):
        assert value(f"vgraph:request_{phase}_time_seconds_count") >= 2
    assert value("vgraph:request_decode_time_seconds_sum") > 0
    assert value("vgraph:request_generation_tokens_count") >= 2
    # each request made exactly 5 tokens: all of them in the bucket le=5, none in le=2
    gen = re.findall(
        r'vgraph:request_generation_tokens_bucket\{le="(\S+)",model_name="tiny"\} (\S+)', text
    )
    by_le = {le: float(n) for le, n in gen}
    assert by_le["5.0"] >= 2 and by_le["2.0"] < by_le["5.0"]
    assert value("vgraph:request_prompt_tokens_sum") > 0
    assert value("vgraph:iteration_tokens_total_count") > 0


def test_busy_port_fails_before_the_model_loads(serve_model_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen(1)
        t0 = time.monotonic()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "vgraph.entrypoints.cli",
                "serve",
                str(serve_model_dir),
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        elapsed = time.monotonic() - t0
    assert out.returncode == 1, out.stderr
    assert f"cannot bind 127.0.0.1:{port}" in out.stderr and "nothing was loaded" in out.stderr
    assert "engine core" not in out.stderr and "resolved config" not in out.stderr
    assert elapsed < 30, elapsed  # interpreter start-up and imports only, no model


def test_one_request_id_for_concurrent_and_retried_requests(srv: ServerProcess) -> None:
    """An X-Request-Id names the responses, not the engine's requests (as vLLM): two requests
    sent at once with one id are both served, and a retry that reuses the id of a stream its
    client left gets only its own tokens, not the left stream's last ones."""
    auth = {"Authorization": f"Bearer {KEYS[0]}"}
    body = {"model": "tiny", "prompt": "Hello there", "temperature": 0, "ignore_eos": True}

    def complete_as(request_id: str) -> dict:
        resp = httpx.post(
            f"{srv.url}/v1/completions",
            json={**body, "max_tokens": 12},
            headers={**auth, "X-Request-Id": request_id},
            timeout=60,
        )
        assert resp.status_code == 200, resp.text
        return resp.json()

    reference = complete_as("ref")
    assert reference["usage"]["completion_tokens"] == 12
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(complete_as, ["same", "same"]))
    assert [r["id"] for r in both] == ["cmpl-same", "cmpl-same"]
    assert [r["choices"] for r in both] == [reference["choices"]] * 2

    for _ in range(3):
        with httpx.stream(
            "POST",
            f"{srv.url}/v1/completions",
            json={**body, "max_tokens": 200, "stream": True},
            headers={**auth, "X-Request-Id": "retry"},
            timeout=60,
        ) as stream:
            assert stream.status_code == 200
            next(line for line in stream.iter_lines() if line)  # a token came: hang up
        retry = complete_as("retry")
        assert retry["id"] == "cmpl-retry"
        assert retry["choices"] == reference["choices"]
        assert retry["usage"]["completion_tokens"] == 12


def test_null_means_the_default(srv: ServerProcess) -> None:
    """Clients that send every field send null for those they leave unset; OpenAI documents n,
    stream, echo and logprobs as "or null": each null is the field's default."""
    auth = {"Authorization": f"Bearer {KEYS[0]}"}
    nulls = {
        "completions": ["n", "stream", "echo", "ignore_eos", "min_tokens", "logprobs", "seed"],
        "chat/completions": ["n", "stream", "logprobs", "top_logprobs", "add_generation_prompt"],
    }
    for path, fields in nulls.items():
        body = {"model": "tiny", "temperature": 0, "max_tokens": 6}
        body.update(
            {"prompt": "Hello there"}
            if path == "completions"
            else {"messages": [{"role": "user", "content": "Hi", "name": None}]}
        )
        got = [
            httpx.post(f"{srv.url}/v1/{path}", json=b, headers=auth, timeout=60)
            for b in (body, {**body, **dict.fromkeys(fields)})
        ]
        assert [r.status_code for r in got] == [200, 200], got[1].text
        assert got[1].json()["choices"] == got[0].json()["choices"]


def test_a_request_with_n_samples_observes_its_prompt_once(srv: ServerProcess) -> None:
    """n=4 over a 4-token prompt: the per-request prompt histogram takes 4 (once, as the success
    counter counts the request once); the prompt-token counter takes 16, what the engine ran."""

    def metrics() -> dict[str, float]:
        text = httpx.get(f"{srv.url}/metrics").text
        found = re.findall(r'^(vgraph:\w+)\{model_name="tiny"\} (\S+)$', text, re.M)
        return {name: float(v) for name, v in found}

    before = metrics()
    resp = httpx.post(
        f"{srv.url}/v1/completions",
        json={"model": "tiny", "prompt": [5, 6, 7, 8], "max_tokens": 2, "n": 4},
        headers={"Authorization": f"Bearer {KEYS[0]}"},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    after = metrics()

    def delta(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    assert delta("vgraph:request_prompt_tokens_count") == 1
    assert delta("vgraph:request_prompt_tokens_sum") == 4
    assert delta("vgraph:prompt_tokens_total") == 16

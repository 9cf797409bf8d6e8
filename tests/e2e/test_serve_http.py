"""The HTTP layer of `vgraph serve` under odd clients: lone surrogates, long echoes, content
types, a lying Content-Length, a client that leaves mid-body, aborted requests in the metrics,
SIGTERM with requests still running (OpenAI errors for all, then the engine core gone), and
Nagle's algorithm off on served connections."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from pathlib import Path

import httpx
import pytest

from tests.e2e.serve_utils import ServerProcess, pid_alive, wait_until
from tests.e2e.test_serve_openai import metric

ERROR_KEYS = {"message", "type", "param", "code"}


def post(server: ServerProcess, path: str, raw: bytes, ctype: str = "application/json"):
    headers = {"Content-Type": ctype} if ctype else {}
    return httpx.post(f"{server.url}/v1/{path}", content=raw, headers=headers, timeout=60)


def error_of(resp: httpx.Response, status: int) -> dict[str, object]:
    assert resp.status_code == status, resp.text[:300]
    err = resp.json()["error"]
    assert set(err) == ERROR_KEYS and err["message"], err
    return err


SURROGATES = [
    ("completions", b'{"prompt": "a\\ud800b", "max_tokens": 2}', "prompt"),
    ("completions", b'{"prompt": ["ok", "\\udfff"], "max_tokens": 2}', "prompt"),
    ("completions", b'{"prompt": "hi", "model": "\\ud800", "max_tokens": 2}', "model"),
    ("completions", b'{"prompt": "hi", "stop": ["\\udc00"], "max_tokens": 2}', "stop"),
    ("completions", b'{"prompt": "hi", "\\ud800": 1}', None),
    (
        "chat/completions",
        b'{"messages": [{"role": "user", "content": "\\ud83d"}], "max_tokens": 2}',
        "messages",
    ),
    (
        "chat/completions",
        b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ude00"}]}]}',
        "messages",
    ),
    (
        "chat/completions",
        b'{"messages": [{"role": "user", "content": "x"}], "model": "\\ud800"}',
        "model",
    ),
]


@pytest.mark.parametrize(("path", "raw", "param"), SURROGATES)
def test_lone_surrogate_is_400(
    server: ServerProcess, path: str, raw: bytes, param: str | None
) -> None:
    err = error_of(post(server, path, raw), 400)
    assert "surrogate" in str(err["message"])
    if param is not None:
        assert str(err["param"]).split(".")[0] == param, err


def test_surrogate_pair_is_text(server: ServerProcess) -> None:
    raw = b'{"prompt": "smile \\ud83d\\ude00", "max_tokens": 2}'  # a valid pair: one emoji
    assert post(server, "completions", raw).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "hi", "model": "m" * 500_000},
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "t" * 500_000}},
        },
        {"messages": [{"role": "user", "content": "x"}], "model": "m" * 500_000},
    ],
    ids=["model name", "tool name", "chat model name"],
)
def test_errors_quote_a_short_prefix(server: ServerProcess, body: dict[str, object]) -> None:
    path = "chat/completions" if "messages" in body else "completions"
    resp = post(server, path, json.dumps(body).encode())
    assert resp.status_code in (400, 404)
    assert len(resp.content) < 2000, len(resp.content)
    err = resp.json()["error"]
    assert set(err) == ERROR_KEYS and "500000 characters" in str(err["message"])


def test_unknown_field_is_ignored_and_logged_briefly(server: ServerProcess) -> None:
    start = len(server.log())
    raw = json.dumps({"prompt": "hi", "max_tokens": 1, "k" * 500_000: 1}).encode()
    assert post(server, "completions", raw).status_code == 200
    (line,) = [ln for ln in server.log()[start:].splitlines() if "ignored unknown" in ln]
    assert "500000 characters" in line and len(line) < 300, line[:300]


@pytest.mark.parametrize(
    "ctype",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""],
)
def test_post_needs_json_content_type(server: ServerProcess, ctype: str) -> None:
    resp = post(server, "completions", b'{"prompt": "hi", "max_tokens": 2}', ctype)
    err = error_of(resp, 415)
    assert "application/json" in str(err["message"])
    resp = post(
        server, "chat/completions", b'{"messages": [{"role": "user", "content": "x"}]}', ctype
    )
    error_of(resp, 415)


def test_json_content_type_with_parameters(server: ServerProcess) -> None:
    for ctype in ("application/json; charset=utf-8", "Application/JSON"):
        resp = post(server, "completions", b'{"prompt": "hi", "max_tokens": 2}', ctype)
        assert resp.status_code == 200, resp.text


def raw_request(server: ServerProcess, head: bytes, body: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(head + b"\r\n\r\n" + body)
    return sock


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_declared_huge_body_gets_413_from_the_header(server: ServerProcess) -> None:
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000000000"
    )
    with raw_request(server, head, b'{"prompt": "' + b"a" * 1024) as sock:
        data = read_response(sock)  # the server answers, then closes: no timeout
    status_line, _, rest = data.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413"), data[:300]
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "request_too_large"


def test_client_leaving_mid_body_is_quiet(server: ServerProcess) -> None:
    start = len(server.log())
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 5000"
    )
    raw_request(server, head, b'{"prompt": "' + b"a" * 100).close()

    def handled() -> str:
        log = server.log()[start:]
        return log if "disconnected before sending" in log or "Traceback" in log else ""

    log = wait_until(handled, 30, "the server to notice the disconnect")
    assert "Traceback" not in log and "internal error" not in log, log
    assert server.health() == 200


def test_aborted_requests_are_not_successes(server: ServerProcess) -> None:
    def successes(reason: str) -> float:
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vgraph:request_success_total{")
            and f'finished_reason="{reason}"' in line
        )

    length_before = successes("length")
    body = {"prompt": "Hello", "max_tokens": 240, "stream": True, "ignore_eos": True}
    for _ in range(2):
        with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
            assert next(line for line in r.iter_lines() if line.startswith("data: "))
    wait_until(lambda: metric(server, "num_requests_running") == 0, 30, "the aborts")
    resp = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
    assert resp.status_code == 200
    wait_until(lambda: successes("length") == length_before + 1, 30, "the finished request")
    assert successes("abort") == 0


def test_abort_is_not_a_success_in_the_stat_logger() -> None:
    """The same rule where it is applied: an 'abort' finish (a request the core aborted while
    the frontend still tracked it) is not a request_success."""
    from vgraph.engine.async_llm import IterationStats
    from vgraph.entrypoints.openai.metrics import PrometheusStatLogger

    stats = PrometheusStatLogger("m")
    stats.record(None, IterationStats(finish_reasons=["abort", "length", "stop", "abort"]))
    lines = [
        line
        for line in stats.render().decode().splitlines()
        if line.startswith("vgraph:request_success_total{")
    ]
    assert sorted(line.split('finished_reason="')[1].split('"')[0] for line in lines) == [
        "length",
        "stop",
    ]


async def _one_request(http: httpx.AsyncClient, stream: bool) -> object:
    """(status, JSON body) or, streamed, (status, the data of every event)."""
    body = {"prompt": "Once", "max_tokens": 400, "ignore_eos": True, "stream": stream}
    if not stream:
        resp = await http.post("/v1/completions", json=body)
        return resp.status_code, resp.json()
    async with http.stream("POST", "/v1/completions", json=body) as resp:
        events = []
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
        return resp.status_code, events


async def _sigterm_with_requests_open(srv: ServerProcess, num: int) -> list[object]:
    """num requests, streamed and not in turn, each queued in the engine before the next."""

    def in_engine() -> float:
        open_ = metric(srv, "num_requests_running") + metric(srv, "num_requests_waiting")
        return open_ + metric(srv, "request_success_total")

    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as http:
        tasks = []
        for i in range(num):
            tasks.append(asyncio.create_task(_one_request(http, i % 2 == 0)))
            await asyncio.to_thread(
                wait_until, lambda i=i: in_engine() == i + 1, 60, f"request {i} in the engine"
            )
        srv.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(asyncio.gather(*tasks), 60)


def test_sigterm_ends_open_requests_with_openai_errors(
    serve_model_dir: Path, tmp_path: Path
) -> None:
    # one sequence at a time: most requests are still queued when the 2 s drain ends
    srv = ServerProcess(
        serve_model_dir,
        tmp_path,
        "--graceful-shutdown-timeout",
        "2",
        "--max-num-seqs",
        "1",
        "--max-model-len",
        "512",
    )
    try:
        srv.wait_healthy()
        engine_pid = srv.engine_pid()
        results = asyncio.run(_sigterm_with_requests_open(srv, 12))
        assert srv.proc.wait(60) == 0
        assert not pid_alive(engine_pid)  # the server exited after its engine core
    finally:
        srv.stop()
    cut = {"plain": 0, "stream": 0}
    for status, answer in results:
        if isinstance(answer, dict):  # not streamed: a whole completion or an OpenAI 503
            if status == 503:
                assert set(answer["error"]) == ERROR_KEYS
                assert answer["error"]["code"] == "server_shutting_down"
                cut["plain"] += 1
            else:
                assert status == 200 and answer["usage"]["completion_tokens"] == 400
        else:  # streamed: every stream ends with [DONE], after an error event if it was cut
            assert status == 200 and answer[-1] == "[DONE]", answer[-3:]
            last = json.loads(answer[-2])
            if "error" in last:
                assert last["error"]["code"] == "server_shutting_down"
                cut["stream"] += 1
    assert cut["plain"] and cut["stream"], cut
    log = srv.log()
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]


def test_interrupted_shutdown_is_finished_by_the_next(serve_model_dir: Path) -> None:
    """A shutdown interrupted while it waits for the core (a second Ctrl-C) is completed by the
    next call, so the server's last shutdown returns only once the core process is gone."""
    from vgraph.engine.arg_utils import create_engine_config
    from vgraph.engine.client import MPClient

    client = MPClient(
        create_engine_config(str(serve_model_dir), max_model_len=256, num_gpu_blocks_override=64)
    )
    proc = client.proc
    join = proc.join

    def interrupted_join(timeout: float | None = None) -> None:
        proc.join = join  # type: ignore[method-assign]
        raise KeyboardInterrupt

    proc.join = interrupted_join  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        client.shutdown()
    client.shutdown()
    assert not proc.is_alive() and not pid_alive(proc.pid)


def test_served_connections_have_nagle_off() -> None:
    """The listening socket `vgraph serve` binds must give connections with TCP_NODELAY, as
    asyncio's server (uvicorn's) sets it only on TCP-protocol sockets: with Nagle on, a stream's
    first chunk after the headers waited for the client's delayed ACK (~40 ms of TTFT)."""
    from vgraph.entrypoints.openai.startup import bind_socket

    async def accepted_nodelay() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_client, sock=bind_socket("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            value = await accepted
            writer.close()
        return value

    assert asyncio.run(accepted_nodelay()) != 0

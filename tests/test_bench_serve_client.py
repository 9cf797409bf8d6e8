"""`vgraph bench serve`'s stream reader (send_request): server-sent events cut at any byte,
CRLF or LF line ends, the usage chunk, an error event and a malformed one. The transport is
httpx's MockTransport, which hands the reader exactly the byte chunks a test chooses. Then the
whole command against a fake server (no engine): a refused /v1/models, the chat endpoint, the
errors of failed requests. The real server and client together are tested in
tests/e2e/test_serve_load.py."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from vgraph.bench.serve import send_request
from vgraph.entrypoints.cli import main


def sse(chunks: list[dict], sep: str = "\n") -> bytes:
    events = [f"data: {json.dumps(c)}{sep}{sep}" for c in chunks]
    return "".join([": keep-alive" + sep + sep, *events, f"data: [DONE]{sep}{sep}"]).encode()


def choice(text: str) -> dict:
    return {"choices": [{"index": 0, "text": text}]}


def read(body: bytes, cuts: list[int], status: int = 200):
    """send_request over a response whose body arrives in pieces cut at the given offsets."""
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]

    class Pieces(httpx.AsyncByteStream):
        async def __aiter__(self):
            for p in pieces:
                yield p

    transport = httpx.MockTransport(lambda request: httpx.Response(status, stream=Pieces()))

    async def go():
        async with httpx.AsyncClient(transport=transport) as client:
            return await send_request(client, "http://bench/v1/completions", {}, prompt_len=3)

    return asyncio.run(go())


TOKENS = [choice("a"), choice("b"), choice("c"), {"choices": [], "usage": {"completion_tokens": 3}}]


@pytest.mark.parametrize("sep", ["\n", "\r\n"])
@pytest.mark.parametrize("step", [1, 2, 7, 10_000])
def test_events_cut_anywhere_are_read_whole(sep: str, step: int) -> None:
    body = sse(TOKENS, sep)
    res = read(body, list(range(step, len(body), step)))
    assert res.success and not res.error
    assert res.output_tokens == 3 and res.prompt_len == 3
    assert res.ttft > 0 and len(res.itl) == 2  # three chunks with choices: a TTFT and two gaps
    assert res.e2e >= res.ttft


def test_an_error_event_ends_the_request_with_its_message() -> None:
    body = sse([choice("a"), {"error": {"message": "the engine died"}}, choice("b")])
    res = read(body, [5, 40])
    assert not res.success and res.error == "the engine died"


def test_a_malformed_event_is_an_error_not_a_crash() -> None:
    res = read(b"data: {not json}\n\n", [])
    assert not res.success and res.error.startswith("DecodeError")


def test_a_chat_streams_role_chunk_is_no_token() -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    content = {"choices": [{"index": 0, "delta": {"content": "a"}}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}
    body = sse([role, content, content, usage])
    res = read(body, [i for i, _ in enumerate(body) if body[i : i + 6] == b"data: "][1:])
    assert res.success and res.output_tokens == 2 and res.prompt_len == 9
    assert len(res.itl) == 1  # two tokens: a TTFT and one gap, the role chunk counted in neither


def test_a_non_200_answer_is_reported_with_its_body() -> None:
    res = read(b'{"error": "busy"}', [], status=503)
    assert not res.success and res.error.startswith("HTTP 503") and "busy" in res.error


class FakeServer:
    """An OpenAI-style server in a thread, no engine: /v1/models (behind an API key when given
    one), /detokenize, and streamed chat completions (a role chunk, then one chunk per token);
    a completions request gets a 400 with vgraph's error body. Records every body it got."""

    def __init__(self, api_key: str | None = None, output_len: int = 3) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        server = self
        self.bodies: list[tuple[str, dict]] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if api_key and self.headers.get("authorization") != f"Bearer {api_key}":
                    error = {"message": "missing or incorrect API key", "code": "invalid_api_key"}
                    return self.answer(401, json.dumps({"error": error}).encode())
                self.answer(200, json.dumps({"data": [{"id": "tiny"}]}).encode())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.bodies.append((self.path, body))
                if self.path == "/detokenize":
                    text = " ".join(f"t{t}" for t in body["tokens"])
                    return self.answer(200, json.dumps({"prompt": text}).encode())
                if self.path != "/v1/chat/completions":
                    error = {"message": "the model cannot complete text here"}
                    return self.answer(400, json.dumps({"error": error}).encode())
                chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
                chunks += [{"choices": [{"index": 0, "delta": {"content": "x"}}]}] * output_len
                usage = {"prompt_tokens": 11, "completion_tokens": output_len}
                chunks.append({"choices": [], "usage": usage})
                self.answer(200, sse(chunks), "text/event-stream")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_server(request):
    server = FakeServer(**getattr(request, "param", {}))
    yield server
    server.close()


def bench(server: FakeServer, *argv: str) -> int:
    return main(["bench", "serve", "--base-url", server.url, "--num-prompts", "2",
                 "--input-len", "4", "--output-len", "3", *argv])  # fmt: skip


@pytest.mark.parametrize("fake_server", [{"api_key": "secret"}], indirect=True)
def test_a_refused_model_list_is_an_error_with_the_servers_message(
    fake_server, capsys, monkeypatch
) -> None:
    monkeypatch.delenv("VGRAPH_API_KEY", raising=False)
    assert bench(fake_server) == 1
    err = capsys.readouterr().err
    assert "answered HTTP 401: missing or incorrect API key" in err and "--api-key" in err
    assert not [path for path, _ in fake_server.bodies]  # no request was sent
    assert bench(fake_server, "--api-key", "secret", "--endpoint", "/v1/chat/completions") == 0


def test_chat_endpoint_sends_messages_and_reads_deltas(fake_server, tmp_path, capsys) -> None:
    out_dir = tmp_path / "not" / "yet"  # made by the bench
    rc = bench(fake_server, "--endpoint", "/v1/chat/completions", "--save-result",
               "--result-dir", str(out_dir))  # fmt: skip
    assert rc == 0, capsys.readouterr()
    chats = [body for path, body in fake_server.bodies if path == "/v1/chat/completions"]
    assert len(chats) == 2
    for body in chats:
        (message,) = body["messages"]
        assert message["role"] == "user" and message["content"].startswith("t")  # detokenized
        assert body["max_completion_tokens"] == 3 and body["stream"] and "prompt" not in body
    report = json.loads((out_dir / "vgraph-bench-serve.json").read_text())
    assert report["completed"] == 2 and report["total_output_tokens"] == 6
    assert report["total_input_tokens"] == 22  # the usage's prompt_tokens: text and template
    assert all(r["ttft"] > 0 for r in report["requests"]) and report["mean_tpot_ms"] > 0


def test_failed_requests_show_their_error(fake_server, capsys) -> None:
    assert bench(fake_server, "--endpoint", "/v1/completions") == 1
    captured = capsys.readouterr()
    assert "Failed requests:                        2" in captured.out
    assert "2 x HTTP 400: the model cannot complete text here" in captured.err

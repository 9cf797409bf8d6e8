"""`vgraph bench serve`'s stream reader (send_request): server-sent events cut at any byte,
CRLF or LF line ends, the usage chunk, an error event and a malformed one. The transport is
httpx's MockTransport, which hands the reader exactly the byte chunks a test chooses; the real
server and client together are tested in tests/e2e/test_serve_load.py."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from vgraph.bench.serve import send_request


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


def test_a_non_200_answer_is_reported_with_its_body() -> None:
    res = read(b'{"error": "busy"}', [], status=503)
    assert not res.success and res.error.startswith("HTTP 503") and "busy" in res.error

"""Bad requests get the right status and an OpenAI error body; none of them hurts the server,
which is healthy afterwards, answers a good request and holds no KV blocks."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.e2e.serve_utils import ServerProcess, wait_until
from tests.e2e.test_serve_openai import metric

OK = {"prompt": "Hello", "max_tokens": 2}
MSG = [{"role": "user", "content": "hi"}]


def body(**fields: object) -> bytes:
    return json.dumps({**OK, **fields}).encode()


# (name, path, raw body, expected status, expected error param or None)
CASES = [
    ("invalid JSON", "completions", b'{"prompt": "hi",', 400, None),
    ("non-UTF-8 bytes", "completions", b'{"prompt": "\xff\xfe\xfa"}', 400, None),
    ("10 MB body", "completions", body(prompt="a" * (10 << 20)), 413, None),
    ("empty body", "completions", b"", 400, None),
    ("JSON array, not object", "completions", b"[1, 2, 3]", 400, None),
    ("NaN", "completions", b'{"prompt": "hi", "temperature": NaN}', 400, None),
    ("deeply nested JSON", "completions", b"[" * 200_000 + b"]" * 200_000, 400, None),
    ("missing prompt", "completions", b'{"max_tokens": 2}', 400, "prompt"),
    ("prompt null", "completions", b'{"prompt": null}', 400, "prompt"),
    ("max_tokens wrong type", "completions", body(max_tokens="ten"), 400, "max_tokens"),
    ("max_tokens a bool", "completions", body(max_tokens=True), 400, "max_tokens"),
    ("max_tokens a numeric string, 0", "completions", body(max_tokens="0"), 400, "max_tokens"),
    ("temperature 'nan'", "completions", body(temperature="nan"), 400, "temperature"),
    ("seed a bool", "completions", body(seed=False), 400, "seed"),
    ("temperature wrong type", "completions", body(temperature="hot"), 400, "temperature"),
    ("stream wrong type", "completions", body(stream="yes"), 400, "stream"),
    ("negative max_tokens", "completions", body(max_tokens=-5), 400, "max_tokens"),
    ("max_tokens 0", "completions", body(max_tokens=0), 400, "max_tokens"),
    ("huge max_tokens", "completions", body(max_tokens=10**30), 400, "max_tokens"),
    ("max_tokens past the context", "completions", body(max_tokens=256), 400, "max_tokens"),
    ("temperature < 0", "completions", body(temperature=-0.5), 400, "temperature"),
    ("top_p 0", "completions", body(top_p=0), 400, "top_p"),
    ("top_p > 1", "completions", body(top_p=1.5), 400, "top_p"),
    ("top_k -5", "completions", body(top_k=-5), 400, "top_k"),
    ("min_p 2", "completions", body(min_p=2), 400, "min_p"),
    ("n 0", "completions", body(n=0), 400, "n"),
    ("huge n", "completions", body(n=10**9), 400, "n"),
    ("negative seed", "completions", body(seed=-1), 400, "seed"),
    ("huge seed", "completions", body(seed=2**70), 400, "seed"),
    ("logprobs too large", "completions", body(logprobs=50), 400, "logprobs"),
    ("empty stop string", "completions", body(stop=[""]), 400, "stop"),
    ("presence_penalty > 2", "completions", body(presence_penalty=3.0), 400, "presence_penalty"),
    (
        "stream_options without stream",
        "completions",
        body(stream_options={"include_usage": True}),
        400,
        "stream_options",
    ),
    ("unknown model", "completions", body(model="gpt-17"), 404, "model"),
    ("guided_regex not a regex", "completions", body(guided_regex="("), 400, "guided_regex"),
    (
        "structured_outputs regex not a regex",
        "completions",
        body(structured_outputs={"regex": "("}),
        400,
        "structured_outputs",
    ),
    ("empty prompt", "completions", body(prompt=""), 400, "prompt"),
    ("empty prompt, streaming", "completions", body(prompt="", stream=True), 400, "prompt"),
    ("empty token list", "completions", body(prompt=[]), 400, "prompt"),
    ("token id out of vocab", "completions", body(prompt=[1, 10**6]), 400, "prompt"),
    ("negative token id", "completions", body(prompt=[-1]), 400, "prompt"),
    ("huge token id", "completions", body(prompt=[2**80]), 400, "prompt"),
    ("prompt over max_model_len", "completions", body(prompt=list(range(300))), 400, "prompt"),
    ("no messages", "chat/completions", b'{"messages": []}', 400, "messages"),
    ("messages null", "chat/completions", b'{"messages": null, "n": null}', 400, "messages"),
    (
        "unknown role",
        "chat/completions",
        json.dumps({"messages": [{"role": "robot", "content": "hi"}]}).encode(),
        400,
        "messages",
    ),
    (
        "content wrong type",
        "chat/completions",
        json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(),
        400,
        "messages",
    ),
    (
        "top_logprobs without logprobs",
        "chat/completions",
        json.dumps({"messages": MSG, "top_logprobs": 2}).encode(),
        400,
        "top_logprobs",
    ),
    (
        "max_completion_tokens past the context",
        "chat/completions",
        json.dumps({"messages": MSG, "max_completion_tokens": 256}).encode(),
        400,
        "max_completion_tokens",
    ),
    (
        "response_format schema not a schema",
        "chat/completions",
        json.dumps(
            {
                "messages": MSG,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "nonsense"}},
                },
            }
        ).encode(),
        400,
        "response_format",
    ),
    (
        "chat over max_model_len",
        "chat/completions",
        json.dumps({"messages": [{"role": "user", "content": "word " * 400}]}).encode(),
        400,
        "messages",
    ),
    (
        "tool_choice named, no tools",
        "chat/completions",
        json.dumps(
            {"messages": MSG, "tool_choice": {"type": "function", "function": {"name": "f"}}}
        ).encode(),
        400,
        "tool_choice",
    ),
    (
        "tool_choice unknown",
        "chat/completions",
        json.dumps({"messages": MSG, "tool_choice": "always"}).encode(),
        400,
        "tool_choice",
    ),
    (
        "tool without a name",
        "chat/completions",
        json.dumps({"messages": MSG, "tools": [{"type": "function", "function": {}}]}).encode(),
        400,
        "tools",
    ),
    (
        "chat_template_kwargs overriding tokenize",
        "chat/completions",
        json.dumps({"messages": MSG, "chat_template_kwargs": {"tokenize": True}}).encode(),
        400,
        "chat_template_kwargs",
    ),
    (
        "a request's chat_template on a server that does not trust them",
        "chat/completions",
        json.dumps({"messages": MSG, "chat_template": "{{ messages[0].content }}"}).encode(),
        400,
        "chat_template",
    ),
    (
        "chat unknown model",
        "chat/completions",
        json.dumps({"messages": MSG, "model": "nope"}).encode(),
        404,
        "model",
    ),
]


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> httpx.Client:
    with httpx.Client(base_url=f"{server.url}/v1", timeout=60) as client:
        yield client


@pytest.mark.parametrize(
    ("name", "path", "raw", "status", "param"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_request(
    http: httpx.Client, name: str, path: str, raw: bytes, status: int, param: str | None
) -> None:
    resp = http.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert resp.status_code == status, resp.text[:500]
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert err["type"] in ("invalid_request_error", "not_found_error")
    if param is not None:
        assert err["param"] is not None and err["param"].split(".")[0] == param, err


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": "notadict"}}},
            "response_format.json_schema.schema",
            "dictionary",
        ),
        ({"structured_outputs": {"json": 5}}, "structured_outputs.json", "an object, or its text"),
        ({"guided_json": 5}, "guided_json", "an object, or its text"),
    ],
)
def test_nested_field_errors_name_the_field(
    http: httpx.Client, fields: dict[str, object], param: str, words: str
) -> None:
    """A bad value under an aliased field (json_schema's `schema`, structured_outputs' `json`) is
    named by its whole JSON path, not its parent's."""
    resp = http.post("chat/completions", json={"messages": MSG, **fields})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["param"] == param and err["message"].startswith(f"{param}: ")
    assert words in err["message"], err


def test_other_http_errors(server: ServerProcess) -> None:
    resp = httpx.get(f"{server.url}/v1/completions")
    assert resp.status_code == 405 and resp.headers["allow"] == "POST"
    resp = httpx.get(f"{server.url}/no/such/route")
    assert resp.status_code == 404 and resp.json()["error"]["message"]


def test_server_unhurt_after_bad_requests(server: ServerProcess, http: httpx.Client) -> None:
    assert len(CASES) >= 20
    assert server.health() == 200
    resp = http.post("completions", json={"prompt": "Hello", "max_tokens": 3, "ignore_eos": True})
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 3
    wait_until(lambda: metric(server, "num_requests_running") == 0, 30, "an idle engine")
    assert metric(server, "kv_cache_usage_perc") == 0.0

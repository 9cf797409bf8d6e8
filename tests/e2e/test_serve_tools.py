"""`vgraph serve` as vLLM clients use it, through the official openai client: tool calls (auto,
streaming and not, a round trip with the tool's result), unknown request fields ignored,
numeric strings, the generation config's defaults, /tokenize, /detokenize, a request's own
chat template (the server trusts them), /ping,
/v1/models/{id}, CORS preflight and X-Request-Id.

One server on the scripted tool model (a tiny Qwen2 that answers every prompt with TOOL_PIECES:
"Checking. " and a Hermes <tool_call> for get_weather(city="Paris"), then EOS), so the parser
is picked by architecture (--tool-call-parser auto -> hermes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.serve_utils import ServerProcess
from tests.tiny_models import TOOL_PIECES

ORIGIN = "http://good.example"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(
    tool_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    srv = ServerProcess(
        tool_model_dir,
        tmp_path_factory.mktemp("server-tools"),
        "--enable-request-id-headers",
        "--allowed-origins",
        json.dumps([ORIGIN]),
        "--enable-auto-tool-choice",
        "--trust-request-chat-template",
    )
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_tool_call_round_trip(client: openai.OpenAI, server: ServerProcess) -> None:
    resp = client.chat.completions.create(model=server.model_name, messages=ASK, tools=TOOLS)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    # the call and its result go back as history; the template renders both
    history = [
        *ASK,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"},
    ]
    again = client.chat.completions.create(model=server.model_name, messages=history, tools=TOOLS)
    assert again.choices[0].finish_reason == "tool_calls"
    prompt = detokenize(server, tokenize(server, messages=history, tools=TOOLS)["tokens"])
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert "<tool_response>\n18 C and sunny\n</tool_response>" in prompt
    assert again.usage.prompt_tokens == tokenize(server, messages=history, tools=TOOLS)["count"]


def test_tool_call_streamed(client: openai.OpenAI, server: ServerProcess) -> None:
    chunks = list(
        client.chat.completions.create(
            model=server.model_name, messages=ASK, tools=TOOLS, stream=True
        )
    )
    deltas = [c.choices[0].delta for c in chunks]
    content = "".join(d.content or "" for d in deltas)
    assert content == "Checking. "  # the half-written "<tool" was held back, never sent
    calls = [tc for d in deltas for tc in d.tool_calls or ()]
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].id.startswith("call_")
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks][-1] == "tool_calls"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_tool_choice_none_and_no_tools_give_text(client: openai.OpenAI, server) -> None:
    for extra in ({"tools": TOOLS, "tool_choice": "none"}, {}):
        resp = client.chat.completions.create(model=server.model_name, messages=ASK, **extra)
        choice = resp.choices[0]
        assert choice.finish_reason == "stop" and not choice.message.tool_calls
        assert choice.message.content == "".join(TOOL_PIECES)


def test_bad_tool_choice_is_400(client: openai.OpenAI, server: ServerProcess) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    for extra in ({"tools": TOOLS, "tool_choice": named}, {"tool_choice": "required"}):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=server.model_name, messages=ASK, **extra)
        assert e.value.body["param"] == "tool_choice", e.value.body


def test_unknown_fields_are_ignored_and_logged(client: openai.OpenAI, server) -> None:
    start = len(server.log())
    resp = client.chat.completions.create(
        model=server.model_name,
        messages=[{"role": "user", "content": "hi", "refusal": None}],
        metadata={"app": "test"},
        store=False,
        parallel_tool_calls=True,
        service_tier="auto",
        reasoning_effort="low",
        extra_body={"some_future_field": {"x": 1}},
    )
    assert resp.choices[0].message.content == "".join(TOOL_PIECES)
    lines = [ln for ln in server.log()[start:].splitlines() if "ignored unknown" in ln]
    assert len(lines) == 1, lines
    for name in (
        "metadata",
        "store",
        "parallel_tool_calls",
        "service_tier",
        "reasoning_effort",
        "some_future_field",
        "messages.0.refusal",
    ):
        assert name in lines[0], lines[0]


def test_numbers_may_be_numeric_strings(server: ServerProcess) -> None:
    body = {"prompt": "Hi", "max_tokens": "2", "temperature": "0.5", "ignore_eos": True}
    resp = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["completion_tokens"] == 2
    for bad, field in (({"max_tokens": "two"}, "max_tokens"), ({"top_p": "2"}, "top_p")):
        resp = httpx.post(f"{server.url}/v1/completions", json={**body, **bad}, timeout=60)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == field, resp.text


def test_generation_config_caps_max_tokens(client: openai.OpenAI, server) -> None:
    """generation_config.json has max_new_tokens 6: the default (16), and even a larger
    request, stop there (as vLLM); with EOS ignored the scripted answer repeats past 4."""
    for extra in ({}, {"max_tokens": 10}):
        resp = client.completions.create(
            model=server.model_name, prompt="Hi", extra_body={"ignore_eos": True}, **extra
        )
        assert resp.usage.completion_tokens == 6 and resp.choices[0].finish_reason == "length"


def tokenize(server: ServerProcess, **body: object) -> dict:
    resp = httpx.post(f"{server.url}/tokenize", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def detokenize(server: ServerProcess, tokens: list[int]) -> str:
    resp = httpx.post(f"{server.url}/detokenize", json={"tokens": tokens}, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()["prompt"]


def test_tokenize_and_detokenize(server: ServerProcess) -> None:
    got = tokenize(server, prompt="Hello world", return_token_strs=True)
    assert got["count"] == len(got["tokens"]) == len(got["token_strs"]) > 0
    assert got["max_model_len"] == 256
    assert detokenize(server, got["tokens"]) == "Hello world"
    chat = tokenize(server, messages=ASK, chat_template_kwargs={"greeting": "Hey!"})
    assert detokenize(server, chat["tokens"]).startswith("Hey!\n<|im_start|>user\nWhat is")
    for path, body, param in (
        ("tokenize", {"prompt": "a", "messages": ASK}, "prompt"),
        ("tokenize", {"messages": ASK, "chat_template_kwargs": {"tokenize": 1}}, None),
        ("detokenize", {"tokens": [1, 10**7]}, "tokens"),
        ("detokenize", {"tokens": "1 2"}, "tokens"),
    ):
        resp = httpx.post(f"{server.url}/{path}", json=body, timeout=60)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == (param or "chat_template_kwargs")


BRACKETS = "{% for m in messages %}[{{ m.content }}]{% endfor %}"


def test_request_chat_template(client: openai.OpenAI, server: ServerProcess) -> None:
    """--trust-request-chat-template: a chat or /tokenize request renders with its own template."""
    got = tokenize(server, messages=ASK, chat_template=BRACKETS)
    assert detokenize(server, got["tokens"]) == "[What is the weather in Paris?]"
    resp = client.chat.completions.create(
        model=server.model_name,
        messages=ASK,
        max_tokens=3,
        extra_body={"chat_template": BRACKETS, "echo": False},
    )
    assert resp.usage.prompt_tokens == got["count"]
    bad = httpx.post(
        f"{server.url}/tokenize", json={"messages": ASK, "chat_template": "{% if %}"}, timeout=60
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "chat_template", bad.text


def test_ping_and_model_by_id(client: openai.OpenAI, server: ServerProcess) -> None:
    assert httpx.get(f"{server.url}/ping").status_code == 200
    assert httpx.post(f"{server.url}/ping").status_code == 200
    model = client.models.retrieve(server.model_name)
    assert model.id == server.model_name and model.object == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-17")


def test_cors_preflight(server: ServerProcess) -> None:
    def preflight(origin: str) -> httpx.Response:
        return httpx.options(
            f"{server.url}/v1/chat/completions",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
            timeout=30,
        )

    ok = preflight(ORIGIN)
    assert ok.status_code == 200, ok.text
    assert ok.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in ok.headers["access-control-allow-methods"]
    assert "content-type" in ok.headers["access-control-allow-headers"].lower()
    bad = preflight("http://evil.example")
    assert bad.status_code == 400 and "access-control-allow-origin" not in bad.headers
    simple = httpx.get(f"{server.url}/v1/models", headers={"Origin": ORIGIN}, timeout=30)
    assert simple.headers["access-control-allow-origin"] == ORIGIN


def test_request_id_header(client: openai.OpenAI, server: ServerProcess) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=server.model_name, messages=ASK, extra_headers={"X-Request-Id": "trace-42"}
    )
    assert raw.headers["x-request-id"] == "trace-42"
    assert raw.parse().id == "chatcmpl-trace-42"
    fresh = client.completions.with_raw_response.create(
        model=server.model_name, prompt="Hi", max_tokens=1
    )
    assert len(fresh.headers["x-request-id"]) == 32
    assert fresh.parse().id == f"cmpl-{fresh.headers['x-request-id']}"
    bad = httpx.post(
        f"{server.url}/v1/completions",
        json={"prompt": "Hi", "max_tokens": 1},
        headers={"X-Request-Id": "x" * 200},
        timeout=30,
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Request-Id"

"""Tool-call parsers on model outputs: Hermes (Qwen) and Llama 3 JSON, whole and streamed; text
that is not a call stays content; the forced-call schema and its reader. No model needed."""

from __future__ import annotations

import json

import pytest

from vgraph.entrypoints.openai.protocol import ChatCompletionRequest
from vgraph.entrypoints.openai.tool_parsers import (
    HermesToolParser,
    Llama3JsonToolParser,
    ToolParser,
    forced_tool_schema,
    make_tool_parser,
    parse_forced_tool_calls,
)

HERMES = (
    'Let me look. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
    '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
)
LLAMA = (
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
    '{"name": "get_time", "arguments": {}}'
)


def calls(parser: ToolParser, text: str) -> tuple[str | None, list[tuple[str, dict]]]:
    content, found = parser.extract(text)
    return content, [(c.name, json.loads(c.arguments)) for c in found]


def test_hermes_content_and_two_calls() -> None:
    assert calls(HermesToolParser(), HERMES) == (
        "Let me look.",
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    )
    unclosed = '<tool_call>{"name": "f", "arguments": {"x": 1}}'  # ended by EOS
    assert calls(HermesToolParser(), unclosed) == (None, [("f", {"x": 1})])


def test_llama3_json_calls() -> None:
    assert calls(Llama3JsonToolParser(), LLAMA) == (
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    )
    assert calls(Llama3JsonToolParser(), ' {"name": "f"}') == (None, [("f", {})])


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (HermesToolParser(), "no calls here"),
        (HermesToolParser(), "<tool_call>{not json}</tool_call>"),
        (HermesToolParser(), '<tool_call>{"name": 5, "arguments": {}}</tool_call>'),
        (HermesToolParser(), '<tool_call>{"name": "f", "arguments": [1]}</tool_call>'),
        (Llama3JsonToolParser(), "The answer is {x}"),
        (Llama3JsonToolParser(), '{"city": "Paris"}'),
        (Llama3JsonToolParser(), '{"name": "f", "parameters": {}} and then text'),
    ],
)
def test_text_that_is_not_a_call_is_content(parser: ToolParser, text: str) -> None:
    assert parser.extract(text) == (text, [])


@pytest.mark.parametrize(
    ("parser", "text", "content"),
    [
        (HermesToolParser(), HERMES, "Let me look. "),
        (HermesToolParser(), "Just text, with < and <tool in it.", None),
        (Llama3JsonToolParser(), LLAMA, ""),
        (Llama3JsonToolParser(), "  Plain answer.", None),
    ],
)
def test_streamed_content_end(parser: ToolParser, text: str, content: str | None) -> None:
    """Fed one character at a time: content_end never decreases, never exposes a call, and
    (for plain text) sends everything once the text is whole."""
    ends = [parser.content_end(text[:i]) for i in range(len(text) + 1)]
    assert ends == sorted(ends)
    assert all(0 <= e <= i for i, e in enumerate(ends))
    assert text[: ends[-1]] == (text if content is None else content)


def test_auto_parser_by_architecture() -> None:
    assert make_tool_parser("auto", "Qwen2ForCausalLM").name == "hermes"
    assert make_tool_parser("auto", "Qwen3ForCausalLM").name == "hermes"
    assert make_tool_parser("auto", "LlamaForCausalLM").name == "llama3_json"
    assert make_tool_parser("auto", "MistralForCausalLM") is None
    assert make_tool_parser("hermes", "LlamaForCausalLM").name == "hermes"
    with pytest.raises(ValueError, match="tool_call_parser='pythonic'"):
        make_tool_parser("pythonic", "LlamaForCausalLM")


def request(tool_choice: object) -> ChatCompletionRequest:
    params = {"type": "object", "properties": {"city": {"type": "string"}}}
    return ChatCompletionRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"type": "function", "function": {"name": "get_weather", "parameters": params}},
                {"type": "function", "function": {"name": "get_time"}},
            ],
            "tool_choice": tool_choice,
        }
    )


def test_forced_tool_schema_and_reader() -> None:
    assert forced_tool_schema(request("auto")) is None
    assert forced_tool_schema(request("none")) is None
    named = request({"type": "function", "function": {"name": "get_weather"}})
    assert forced_tool_schema(named)["properties"]["city"] == {"type": "string"}
    (call,) = parse_forced_tool_calls(named, '{"city": "Paris"}')
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})

    required = request("required")
    schema = forced_tool_schema(required)
    assert schema["type"] == "array" and schema["minItems"] == 1
    names = [v["properties"]["name"]["enum"] for v in schema["items"]["anyOf"]]
    assert names == [["get_weather"], ["get_time"]]
    out = '[{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": {}}]'
    assert [c.name for c in parse_forced_tool_calls(required, out)] == ["get_time", "get_weather"]
    assert parse_forced_tool_calls(required, "not json") == []

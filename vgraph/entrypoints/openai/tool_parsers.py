"""Tool calls in a model's output text -> OpenAI `tool_calls`, for tool_choice "auto".

One parser per output convention of the shipped model families (vLLM's --tool-call-parser names):
- `hermes` (Qwen2/2.5/3): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one
  block per call, after optional plain content; an unclosed last block counts (generation may
  end on EOS before the closing tag).
- `llama3_json` (Llama 3.x): the whole output is a JSON object `{"name": ..., "parameters":
  {...}}` (or "arguments"), optionally after `<|python_tag|>`; several joined by `;`.
Output that does not parse as calls is plain content, as in vLLM: a model that starts a call
and writes broken JSON answers with text rather than failing the request.

Streaming holds back text that is, or may become, a call (`content_end`), so content streams
as it comes and the calls arrive whole in the last chunk. tool_choice "required" and a named
function are forced through structured outputs instead: `forced_tool_schema` is the JSON schema
that output must follow and `parse_forced_tool_calls` reads it back.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from vgraph.entrypoints.openai.protocol import ChatCompletionRequest, NamedToolChoice

ARCH_PARSERS = {  # --tool-call-parser auto: config.json "architectures" -> parser
    "Qwen2ForCausalLM": "hermes",
    "Qwen3ForCausalLM": "hermes",
    "LlamaForCausalLM": "llama3_json",
}


@dataclass
class ParsedToolCall:
    name: str
    arguments: str  # JSON text

    def openai(self) -> dict[str, Any]:
        """The OpenAI tool call object, with a fresh id."""
        return {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ToolParser:
    name = ""

    def extract(self, text: str) -> tuple[str | None, list[ParsedToolCall]]:
        """(content or None, calls) of a whole output; no calls: the text is all content."""
        raise NotImplementedError

    def content_end(self, text: str) -> int:
        """How many leading characters of a growing output are plain content for certain (the
        rest may be a call). Never decreases as the text grows."""
        raise NotImplementedError


class HermesToolParser(ToolParser):
    name = "hermes"
    START, END = "<tool_call>", "</tool_call>"
    _BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)\Z", re.DOTALL)

    def extract(self, text: str) -> tuple[str | None, list[ParsedToolCall]]:
        start = text.find(self.START)
        if start < 0:
            return text, []
        calls = []
        for closed, unclosed in self._BLOCK.findall(text[start:]):
            call = _call_from_json((closed or unclosed).strip())
            if call is None:
                return text, []
            calls.append(call)
        content = text[:start].strip()
        return content or None, calls

    def content_end(self, text: str) -> int:
        start = text.find(self.START)
        if start >= 0:
            return start
        for keep in range(min(len(self.START) - 1, len(text)), 0, -1):
            if self.START.startswith(text[-keep:]):
                return len(text) - keep
        return len(text)


class Llama3JsonToolParser(ToolParser):
    name = "llama3_json"
    TAG = "<|python_tag|>"

    def extract(self, text: str) -> tuple[str | None, list[ParsedToolCall]]:
        body = text.strip()
        body = body.removeprefix(self.TAG).lstrip()
        if not body.startswith("{"):
            return text, []
        decoder, calls, pos = json.JSONDecoder(), [], 0
        while pos < len(body):
            try:
                obj, end = decoder.raw_decode(body, pos)
            except ValueError:
                return text, []
            call = _call_from_obj(obj)
            if call is None:
                return text, []
            calls.append(call)
            pos = end
            while pos < len(body) and body[pos] in " \t\r\n;":
                pos += 1
        return None, calls

    def content_end(self, text: str) -> int:
        body = text.lstrip()
        if not body or body.startswith("{") or self.TAG.startswith(body[: len(self.TAG)]):
            return 0  # may still be (or become) a call: hold everything
        return len(text)


TOOL_PARSERS: dict[str, type[ToolParser]] = {
    p.name: p for p in (HermesToolParser, Llama3JsonToolParser)
}


def make_tool_parser(name: str, architecture: str) -> ToolParser | None:
    """The parser for --tool-call-parser `name` ("auto": by architecture, None if unknown)."""
    if name == "auto":
        name = ARCH_PARSERS.get(architecture, "")
        return TOOL_PARSERS[name]() if name else None
    if name not in TOOL_PARSERS:
        raise ValueError(
            f"tool_call_parser={name!r} is not allowed; use auto or one of {sorted(TOOL_PARSERS)}"
        )
    return TOOL_PARSERS[name]()


def _call_from_json(text: str) -> ParsedToolCall | None:
    try:
        return _call_from_obj(json.loads(text))
    except ValueError:
        return None


def _call_from_obj(obj: Any) -> ParsedToolCall | None:
    """{"name": str, "arguments" or "parameters": object (absent: {})} -> a call, else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = next((obj[k] for k in ("arguments", "parameters") if k in obj), {})
    if not isinstance(args, dict):
        return None
    return ParsedToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


# ---- tool_choice "required" / a named function: forced through structured outputs ------------
def forced_tool_schema(req: ChatCompletionRequest) -> dict[str, Any] | None:
    """The JSON schema the output must follow for tool_choice "required" (an array of
    {"name", "parameters"}, at least one) or a named function (its parameters object), as
    vLLM's; None for "auto" and "none". Structured outputs apply it to the logits."""
    choice = req.resolved_tool_choice()
    tools = {t.function.name: t.function.parameters or {"type": "object"} for t in req.tools or ()}
    if isinstance(choice, NamedToolChoice):
        return tools[choice.function.name]
    if choice != "required":
        return None
    variants = [
        {
            "type": "object",
            "properties": {"name": {"type": "string", "enum": [name]}, "parameters": params},
            "required": ["name", "parameters"],
        }
        for name, params in tools.items()
    ]
    return {"type": "array", "minItems": 1, "items": {"anyOf": variants}}


def parse_forced_tool_calls(req: ChatCompletionRequest, text: str) -> list[ParsedToolCall]:
    """The calls in an output forced by forced_tool_schema (empty if it does not parse)."""
    choice = req.resolved_tool_choice()
    try:
        value = json.loads(text)
    except ValueError:
        return []
    if isinstance(choice, NamedToolChoice):
        if not isinstance(value, dict):
            return []
        return [ParsedToolCall(choice.function.name, json.dumps(value, ensure_ascii=False))]
    calls = [_call_from_obj(v) for v in value] if isinstance(value, list) else []
    return [c for c in calls if c is not None]

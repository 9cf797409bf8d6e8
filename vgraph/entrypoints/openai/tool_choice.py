"""tool_choice "required" or a named function: force valid tool calls through structured outputs.

The chat handler asks structured_outputs_for_tools() for the constraint, generates under it, and
turns the text into OpenAI tool_calls with forced_tool_calls():
- a named function ({"type": "function", "function": {"name": N}}): the output is that
  function's arguments, constrained to its `parameters` schema; one call to N;
- "required": the output is a JSON array of {"name", "parameters"} objects, each name one of the
  tools and its parameters that tool's schema (vLLM's shape); one call per entry.
"none", "auto" and no tool_choice constrain nothing here ("auto" calls are parsed from free text
by the tool parsers). Tools and tool_choice arrive as plain JSON values (dicts), as the request
carries them. A tool_choice naming no given tool is a ValueError naming it.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from vgraph.sampling_params import StructuredOutputsParams

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


def _functions(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """name -> function object of the function tools."""
    out = {}
    for tool in tools or []:
        fn = tool.get("function") if tool.get("type", "function") == "function" else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn
    return out


def forced_function_name(tool_choice: str | dict[str, Any] | None) -> str | None:
    """The function a named tool_choice forces, or None."""
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
        raise ValueError(
            'tool_choice as an object must be {"type": "function", "function": {"name": ...}}'
        )
    return None


def forced_tool_schema(
    tools: list[dict[str, Any]] | None, tool_choice: str | dict[str, Any] | None
) -> dict[str, Any] | None:
    """The JSON schema the output must follow, or None when tool_choice forces nothing."""
    functions = _functions(tools)
    name = forced_function_name(tool_choice)
    if name is not None:
        if name not in functions:
            raise ValueError(
                f"tool_choice names the function {name[:64]!r}, which is not among the tools "
                f"({', '.join(sorted(functions))[:200] or 'none given'})"
            )
        return functions[name].get("parameters") or _ANY_OBJECT
    if tool_choice != "required":
        return None
    if not functions:
        raise ValueError('tool_choice "required" needs at least one function in tools')
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [fn_name]},
                "parameters": fn.get("parameters") or _ANY_OBJECT,
            },
            "required": ["name", "parameters"],
        }
        for fn_name, fn in functions.items()
    ]
    return {"type": "array", "minItems": 1, "items": {"anyOf": calls}}


def structured_outputs_for_tools(
    tools: list[dict[str, Any]] | None, tool_choice: str | dict[str, Any] | None
) -> StructuredOutputsParams | None:
    schema = forced_tool_schema(tools, tool_choice)
    return None if schema is None else StructuredOutputsParams(json=schema)


def forced_tool_calls(
    tool_choice: str | dict[str, Any] | None, text: str
) -> list[dict[str, Any]] | None:
    """OpenAI tool_calls from an output generated under the forced schema; None if the text is
    not a complete call (generation stopped early, e.g. at max_tokens)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    name = forced_function_name(tool_choice)
    if name is not None:
        pairs = [(name, value)]
    elif isinstance(value, list) and all(
        isinstance(v, dict) and "name" in v and "parameters" in v for v in value
    ):
        pairs = [(v["name"], v["parameters"]) for v in value]
    else:
        return None
    return [
        {
            "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
            "type": "function",
            "function": {"name": n, "arguments": json.dumps(args, ensure_ascii=False)},
        }
        for n, args in pairs
    ]

"""OpenAI API request models (pydantic) and the OpenAI error shape.

Choices, documented here once:
- Unknown fields are accepted and ignored, as vLLM does: SDKs and agent frameworks send newer
  fields (metadata, store, parallel_tool_calls, service_tier, reasoning_effort, ...). The server
  logs one line per request naming them (`ignored_fields`). vLLM's sampling extensions that vgraph
  implements (top_k, min_p, ignore_eos, min_tokens, stop_token_ids, ...) are known fields; the
  openai client sends them through `extra_body`.
- Types of known fields are strict (true is not a number, "yes" is not a boolean), except that
  numbers may come as numeric strings ("5", "0.7"), as pydantic's lax mode and vLLM allow:
  `LaxInt` / `LaxFloat`. Ranges and size limits apply to the converted value.
- OpenAI fields vgraph does not implement are accepted only at their neutral value
  (presence_penalty 0, echo false, ...); anything else is a 400 that says so.
Responses are plain dicts built by the serving modules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from vgraph.sampling_params import (
    MAX_LOGPROBS,
    MAX_STOP_STRINGS,
    SamplingParams,
    SamplingParamsError,
)

Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # lax mode would read true as 1
        raise ValueError("must be a number, not a boolean")
    return value


LaxInt = Annotated[int, BeforeValidator(_not_bool), Field(strict=False)]
LaxFloat = Annotated[float, BeforeValidator(_not_bool), Field(strict=False, allow_inf_nan=False)]
MAX_N = 128  # samples per request: bounds the work one request can ask for
MAX_STOP = MAX_STOP_STRINGS
MAX_ECHO = 64  # characters of user input an error message may quote
MAX_MESSAGE = 1024  # an error message is cut here, whatever it quotes
MAX_TOOLS = 128  # tools offered, and tool calls in one history message
MAX_TOOL_NAME = 256


def brief(text: str, limit: int = MAX_ECHO) -> str:
    """User input as an error message may quote it: at most `limit` characters."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class APIError(Exception):
    """An error for the client, rendered as {"error": {message, type, param, code}}."""

    TYPES: ClassVar[dict[int, str]] = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        405: "invalid_request_error",
        413: "invalid_request_error",
        415: "invalid_request_error",
        500: "internal_server_error",
        503: "service_unavailable_error",
    }

    def __init__(
        self, message: str, status: int = 400, param: str | None = None, code: str | None = None
    ) -> None:
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + "... (message cut)"
        super().__init__(message)
        self.message, self.status, self.param, self.code = message, status, param, code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.TYPES.get(self.status, "error"),
                "param": self.param,
                "code": self.code,
            }
        }


class StrictModel(BaseModel):
    """Strict types; unknown fields are kept in model_extra and ignored (see ignored_fields)."""

    model_config = ConfigDict(extra="allow", strict=True)


def ignored_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted names of the unknown fields in a parsed request, nested models included."""
    names = [f"{prefix}{k}" for k in model.model_extra or {}]
    for name in type(model).model_fields:
        value = getattr(model, name)
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, BaseModel):
                where = f"{prefix}{name}.{i}." if isinstance(value, list) else f"{prefix}{name}."
                names.extend(ignored_fields(item, where))
    return names


class StreamOptions(StrictModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class SamplingRequest(StrictModel):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model: str | None = None
    n: LaxInt = Field(1, ge=1, le=MAX_N)
    max_tokens: LaxInt | None = Field(None, ge=1, le=2**31 - 1)
    temperature: LaxFloat | None = Field(None, ge=0.0, le=2.0)
    top_p: LaxFloat | None = Field(None, gt=0.0, le=1.0)
    top_k: LaxInt | None = Field(None, ge=-1, le=2**31 - 1)  # 0 and -1: off
    min_p: LaxFloat | None = Field(None, ge=0.0, le=1.0)
    seed: LaxInt | None = Field(None, ge=0, le=2**63 - 1)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = None
    stop_token_ids: list[Annotated[LaxInt, Field(ge=0, le=2**31 - 1)]] | None = None
    ignore_eos: bool = False
    min_tokens: LaxInt = Field(0, ge=0, le=2**31 - 1)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    def check_unsupported(self) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0.0):
                raise APIError(f"{name} is not supported by vgraph; omit it or send 0", param=name)
        if self.logit_bias:
            raise APIError("logit_bias is not supported by vgraph", param="logit_bias")
        if self.stream_options is not None and not self.stream:
            raise APIError(
                "stream_options is only allowed with stream=true", param="stream_options"
            )

    def sampling_params(
        self, max_tokens: int, logprobs: int | None, defaults: Mapping[str, Any] | None = None
    ) -> SamplingParams:
        """SamplingParams of this request; its own checks become a 400 naming the field.
        defaults: values for the fields the request leaves out (the model's generation config)."""
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        defaults = defaults or {}

        def pick(name: str, neutral: Any) -> Any:
            value = getattr(self, name)
            return defaults.get(name, neutral) if value is None else value

        top_k = pick("top_k", -1)
        try:
            return SamplingParams(
                n=self.n,
                temperature=pick("temperature", 1.0),
                top_p=pick("top_p", 1.0),
                top_k=-1 if top_k == 0 else top_k,
                min_p=pick("min_p", 0.0),
                seed=self.seed,
                max_tokens=max_tokens,
                min_tokens=self.min_tokens,
                stop=stop,
                stop_token_ids=self.stop_token_ids,
                ignore_eos=self.ignore_eos,
                logprobs=logprobs,
                include_stop_str_in_output=self.include_stop_str_in_output,
                skip_special_tokens=self.skip_special_tokens,
            )
        except SamplingParamsError as e:
            raise APIError(str(e), param=e.field) from None


class CompletionRequest(SamplingRequest):
    prompt: str | list[Int64] | list[str] | list[list[Int64]]  # max_tokens None: 16
    logprobs: LaxInt | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    best_of: LaxInt | None = None

    def check_unsupported(self) -> None:
        super().check_unsupported()
        if self.echo:
            raise APIError("echo is not supported by vgraph", param="echo")
        if self.suffix:
            raise APIError("suffix is not supported by vgraph", param="suffix")
        if self.best_of not in (None, self.n):
            raise APIError(
                "best_of is not supported by vgraph; omit it or make it equal n", param="best_of"
            )


class TextPart(StrictModel):
    type: Literal["text"]
    text: str


class FunctionCall(StrictModel):
    name: str
    arguments: str  # JSON text, as OpenAI sends and returns it


class ToolCall(StrictModel):
    """An assistant's earlier call, as the history in a request carries it."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionDefinition(StrictModel):
    name: Annotated[str, Field(min_length=1, max_length=MAX_TOOL_NAME)]
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema
    strict: bool | None = None


class Tool(StrictModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(StrictModel):
    name: str


class NamedToolChoice(StrictModel):
    type: Literal["function"]
    function: NamedFunction


class ChatMessage(StrictModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: Annotated[list[ToolCall], Field(max_length=MAX_TOOLS)] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""

    def template_dict(self) -> dict[str, Any]:
        """The message as chat templates read it: arguments of earlier tool calls as objects
        when they are JSON objects (Qwen's and Llama 3's templates render them with tojson)."""
        msg: dict[str, Any] = {"role": self.role, "content": self.text()}
        if self.name is not None:
            msg["name"] = self.name
        if self.tool_call_id is not None:
            msg["tool_call_id"] = self.tool_call_id
        if self.tool_calls is not None:
            msg["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": _json_object(c)},
                }
                for c in self.tool_calls
            ]
        return msg


def _json_object(call: ToolCall) -> dict[str, Any] | str:
    try:
        value = json.loads(call.function.arguments)
    except ValueError:
        return call.function.arguments
    return value if isinstance(value, dict) else call.function.arguments


class ChatCompletionRequest(SamplingRequest):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: LaxInt | None = Field(None, ge=1, le=2**31 - 1)
    logprobs: bool = False
    top_logprobs: LaxInt | None = Field(None, ge=0, le=MAX_LOGPROBS)
    add_generation_prompt: bool = True
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def resolved_tool_choice(self) -> str | NamedToolChoice:
        """As OpenAI: "auto" when tools are given, else "none" ("auto" without tools too)."""
        if self.tool_choice is None or not self.tools and self.tool_choice == "auto":
            return "auto" if self.tools else "none"
        return self.tool_choice

    def check_unsupported(self) -> None:
        super().check_unsupported()
        if self.top_logprobs is not None and not self.logprobs:
            raise APIError("top_logprobs needs logprobs=true", param="top_logprobs")
        choice = self.resolved_tool_choice()
        names = [t.function.name for t in self.tools or ()]
        if not names and (choice == "required" or isinstance(choice, NamedToolChoice)):
            raise APIError("this tool_choice needs `tools`; none were given", param="tool_choice")
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise APIError(
                f"tool_choice names the function {brief(choice.function.name)!r}, which is not "
                f"in `tools` ({brief(', '.join(names))})",
                param="tool_choice",
            )

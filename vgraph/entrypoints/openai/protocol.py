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
- null in a field that has a default means the default (the OpenAI API documents `n`, `stream`,
  `echo`, `logprobs`, ... as "or null", and clients that send every field send null for those
  they leave unset); a required field may not be null.
- OpenAI fields vgraph does not implement are accepted only at their neutral value
  (suffix empty, best_of = n), and so are vLLM's (use_beam_search false: no beam search;
  priority 0: first come, first served only); anything else is a 400 that says so.
- vLLM's cache_salt (checked by vLLM's rule, check_cache_salt) goes with the request's prompts
  to the engine, where it roots their prefix-cache hashes: only the same salt shares blocks.
- Sampling fields (penalties, logit_bias, allowed_token_ids, bad_words, prompt_logprobs) and
  structured outputs (response_format, vLLM's structured_outputs and guided_* extras) map onto
  SamplingParams in sampling_params(); their own checks become a 400 naming the field.
Responses are plain dicts built by the serving modules.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from vgraph.engine.input_processor import check_cache_salt
from vgraph.sampling_params import (
    MAX_LOGPROBS,
    MAX_STOP_STRINGS,
    SamplingParams,
    SamplingParamsError,
    StructuredOutputsParams,
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


def check_model(model: str | None, names: Sequence[str]) -> None:
    """A request's `model`, when given, must be one of the served names (else a 404)."""
    if model is not None and model not in names:
        raise APIError(
            f"The model `{brief(model)}` does not exist; this server serves `{names[0]}`",
            404,
            "model",
            "model_not_found",
        )


class StrictModel(BaseModel):
    """Strict types; unknown fields are kept in model_extra and ignored (see ignored_fields);
    null in a field with a default is the default."""

    model_config = ConfigDict(extra="allow", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        keys = _defaulted_keys(cls)
        return {k: v for k, v in data.items() if v is not None or k not in keys}


@functools.cache
def _defaulted_keys(model: type[BaseModel]) -> frozenset[str]:
    """The names and aliases of a model's fields whose default is not None."""
    return frozenset(
        key
        for name, f in model.model_fields.items()
        if not f.is_required() and f.get_default(call_default_factory=True) is not None
        for key in (name, f.alias)
        if key is not None
    )


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


class JsonSchemaFormat(StrictModel):
    name: str = "schema"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(StrictModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputsRequest(StrictModel):
    """vLLM's `structured_outputs` extra: exactly one of these."""

    json_: str | dict[str, Any] | None = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None


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
    presence_penalty: LaxFloat | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: LaxFloat | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: LaxFloat | None = Field(None, gt=0.0, le=1e6)
    logit_bias: dict[str, LaxFloat] | None = None  # token id (as a string) -> [-100, 100]
    allowed_token_ids: list[Annotated[LaxInt, Field(ge=0, le=2**31 - 1)]] | None = None
    bad_words: list[str] | None = None
    prompt_logprobs: LaxInt | None = Field(None, ge=0, le=MAX_LOGPROBS)
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsRequest | None = None
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    # vLLM's: keep the prompt's last k tokens (-1: max_model_len); logprob tokens as "token_id:N"
    truncate_prompt_tokens: LaxInt | None = Field(None, ge=-1, le=2**31 - 1)
    return_tokens_as_token_ids: bool = False
    # vLLM's: only requests with the same salt share prefix-cache blocks (multi-tenant privacy)
    cache_salt: str | None = None
    # vLLM's, at their neutral values only: vgraph schedules FCFS and has no beam search
    priority: LaxInt = Field(0, ge=-(2**63), le=2**63 - 1)
    use_beam_search: bool = False

    def check_unsupported(self) -> None:
        if self.stream_options is not None and not self.stream:
            raise APIError(
                "stream_options is only allowed with stream=true", param="stream_options"
            )
        try:
            check_cache_salt(self.cache_salt)
        except ValueError as e:
            raise APIError(str(e), param="cache_salt") from None
        if self.use_beam_search:
            raise APIError(
                "use_beam_search=true is not supported: vgraph has no beam search; omit it or "
                "set it to false",
                param="use_beam_search",
            )
        if self.priority != 0:
            # vLLM's words first: clients match them to retry without the field
            raise APIError(
                f"Got priority {self.priority} but Priority scheduling is not enabled: vgraph "
                "schedules first come, first served only (vLLM's --scheduling-policy fcfs); "
                "omit priority or set it to 0",
                param="priority",
            )

    def sampling_params(
        self,
        max_tokens: int,
        logprobs: int | None,
        defaults: Mapping[str, Any] | None = None,
        prompt_logprobs: int | None = None,
        structured_outputs: StructuredOutputsParams | None = None,
    ) -> SamplingParams:
        """SamplingParams of this request; its own checks become a 400 naming the field.
        defaults: values for the fields the request leaves out (the model's generation config).
        prompt_logprobs / structured_outputs: set by the handler (echo, tool_choice) instead of
        the request's own."""
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        defaults = defaults or {}

        def pick(name: str, neutral: Any) -> Any:
            value = getattr(self, name)
            return defaults.get(name, neutral) if value is None else value

        top_k = pick("top_k", -1)
        if prompt_logprobs is None:
            prompt_logprobs = self.prompt_logprobs
        if structured_outputs is None:
            structured_outputs = self.structured_outputs_params()
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
                presence_penalty=self.presence_penalty or 0.0,
                frequency_penalty=self.frequency_penalty or 0.0,
                repetition_penalty=pick("repetition_penalty", 1.0),
                logit_bias=self.logit_bias_ids(),
                allowed_token_ids=self.allowed_token_ids,
                bad_words=self.bad_words or None,
                prompt_logprobs=prompt_logprobs,
                structured_outputs=structured_outputs,
            )
        except SamplingParamsError as e:
            raise APIError(str(e), param=e.field) from None

    def logit_bias_ids(self) -> dict[int, float] | None:
        """OpenAI sends logit_bias keys as strings of token ids."""
        if not self.logit_bias:
            return None
        out = {}
        for key, bias in self.logit_bias.items():
            if not key.isdigit() or len(key) > 19:
                raise APIError(
                    f"logit_bias key {brief(key)!r} is not allowed; keys are token ids (as "
                    "strings of digits)",
                    param="logit_bias",
                )
            out[int(key)] = bias
        return out

    def max_tokens_field(self) -> str:
        """The request field that set the output length (for errors)."""
        return "max_tokens"

    def structured_outputs_field(self) -> str:
        """The request field that set the structured-output constraint (for errors)."""
        found = self._structured_constraints()
        return found[0][0] if found else "structured_outputs"

    def _structured_constraints(self) -> list[tuple[str, dict[str, Any]]]:
        """(request field, StructuredOutputsParams kwargs) of each constraint the request sets."""
        found: list[tuple[str, dict[str, Any]]] = []
        rf = self.response_format
        if rf is not None and rf.type == "json_object":
            found.append(("response_format", {"json_object": True}))
        elif rf is not None and rf.type == "json_schema":
            if rf.json_schema is None or rf.json_schema.schema_ is None:
                raise APIError(
                    "response_format of type json_schema needs json_schema.schema",
                    param="response_format",
                )
            found.append(("response_format", {"json": rf.json_schema.schema_}))
        if self.structured_outputs is not None:
            so = self.structured_outputs
            given = {
                "json": so.json_,
                "regex": so.regex,
                "choice": so.choice,
                "grammar": so.grammar,
                "json_object": so.json_object,
            }
            found.append(("structured_outputs", {k: v for k, v in given.items() if v is not None}))
        for name, key in (
            ("guided_json", "json"),
            ("guided_regex", "regex"),
            ("guided_choice", "choice"),
            ("guided_grammar", "grammar"),
        ):
            if getattr(self, name) is not None:
                found.append((name, {key: getattr(self, name)}))
        return found

    def structured_outputs_params(self) -> StructuredOutputsParams | None:
        """The one structured-output constraint this request sets (response_format,
        structured_outputs or a guided_* extra), or None; two at once is a 400."""
        found = self._structured_constraints()
        if not found:
            return None
        if len(found) > 1:
            names = ", ".join(n for n, _ in found)
            raise APIError(
                f"{names}: only one structured-output constraint is allowed per request",
                param=found[1][0],
            )
        name, kwargs = found[0]
        try:
            return StructuredOutputsParams(**kwargs)
        except SamplingParamsError as e:
            raise APIError(str(e), param=name) from None


class CompletionRequest(SamplingRequest):
    prompt: str | list[Int64] | list[str] | list[list[Int64]]  # max_tokens None: 16
    # 0 only with echo: the prompt (and its logprobs) comes back, nothing generated (vLLM's
    # scoring request)
    max_tokens: LaxInt | None = Field(None, ge=0, le=2**31 - 1)
    logprobs: LaxInt | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    best_of: LaxInt | None = None
    add_special_tokens: bool = True  # the tokenizer's own (BOS) on a text prompt, as vLLM

    @property
    def echo_only(self) -> bool:
        """echo with max_tokens 0: the prompt scored, no completion."""
        return self.echo and self.max_tokens == 0

    def check_unsupported(self) -> None:
        super().check_unsupported()
        if self.max_tokens == 0 and not self.echo:
            raise APIError(
                "max_tokens must be >= 1 (got 0); 0 is allowed only with echo, which returns the "
                "prompt and its logprobs without generating",
                param="max_tokens",
            )
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
    # vLLM's: a new assistant turn (the default, unless continue_final_message), or the last
    # message continued; the template's special tokens only, unless add_special_tokens; echo:
    # the reply starts with the last message when that is the assistant's
    add_generation_prompt: bool | None = None
    continue_final_message: bool = False
    add_special_tokens: bool = False
    echo: bool = False
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    chat_template: str | None = None  # a Jinja template's text (--trust-request-chat-template)
    chat_template_kwargs: dict[str, Any] | None = None

    def echoed(self) -> str:
        """What echo puts before each reply: the last message, if it is the assistant's."""
        last = self.messages[-1]
        return last.text() if self.echo and last.role == "assistant" else ""

    def max_tokens_field(self) -> str:
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

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

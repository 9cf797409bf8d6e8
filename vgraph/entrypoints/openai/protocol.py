"""OpenAI API request models (pydantic) and the OpenAI error shape.

Choices, documented here once:
- Unknown fields are rejected with 400 ("Unrecognized request argument supplied: X"), as
  OpenAI's own API does, rather than vLLM's ignore-and-warn: a typo such as `max_token` must not
  silently fall back to a default. vLLM's sampling extensions that vgraph implements (top_k, min_p,
  ignore_eos, min_tokens, stop_token_ids, ...) are known fields; the openai client sends them
  through `extra_body`.
- Types are strict: "5" is not an integer and true is not a number.
- OpenAI fields vgraph does not implement are accepted only at their neutral value
  (presence_penalty 0, echo false, ...); anything else is a 400 that says so.
Responses are plain dicts built by the serving modules.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from vgraph.sampling_params import (
    MAX_LOGPROBS,
    MAX_STOP_STRINGS,
    SamplingParams,
    SamplingParamsError,
)

Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
MAX_N = 128  # samples per request: bounds the work one request can ask for
MAX_STOP = MAX_STOP_STRINGS
MAX_ECHO = 64  # characters of user input an error message may quote
MAX_MESSAGE = 1024  # an error message is cut here, whatever it quotes


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
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(StrictModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class SamplingRequest(StrictModel):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model: str | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    max_tokens: int | None = Field(None, ge=1, le=2**31 - 1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, le=2**31 - 1)  # 0 and -1: off
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0, le=2**31 - 1)]] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0, le=2**31 - 1)
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

    def sampling_params(self, max_tokens: int, logprobs: int | None) -> SamplingParams:
        """SamplingParams of this request; its own checks become a 400 naming the field."""
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        try:
            return SamplingParams(
                n=self.n,
                temperature=1.0 if self.temperature is None else self.temperature,
                top_p=1.0 if self.top_p is None else self.top_p,
                top_k=-1 if self.top_k in (None, 0) else self.top_k,
                min_p=self.min_p or 0.0,
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
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

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


class ChatMessage(StrictModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class ChatCompletionRequest(SamplingRequest):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: int | None = Field(None, ge=1, le=2**31 - 1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    add_generation_prompt: bool = True

    def check_unsupported(self) -> None:
        super().check_unsupported()
        if self.top_logprobs is not None and not self.logprobs:
            raise APIError("top_logprobs needs logprobs=true", param="top_logprobs")

"""SamplingParams: how one request picks its tokens and when it stops. Validated on construction.

A msgspec Struct so the same object crosses the frontend/engine socket without pickling; msgspec
runs __post_init__ on decode too, so the engine core re-checks what it receives. A bad value
raises SamplingParamsError, a ValueError that carries the field's name (`.field`), so callers
such as the HTTP server name the field without reading the message. What depends on the model
(token ids against the vocabulary) is checked by `check_vocab`, which the frontend and the
engine core both call.
"""

from __future__ import annotations

import math

import msgspec

MAX_LOGPROBS = 20  # cap on top-n logprobs per token, as vLLM's default max_logprobs
SAMPLING_EPS = 1e-5  # a temperature below this samples greedily (as vLLM)
MAX_STOP_STRINGS = 16  # stop strings per request
MAX_STOP_STRING_CHARS = 1024  # characters per stop string (streams hold back this many - 1)
MAX_STOP_TOKEN_IDS = 1024  # stop_token_ids per request
MAX_INT64 = 2**63 - 1  # integers cross the socket as msgpack int64
_MAX_REPR = 80  # characters of a rejected value quoted in an error


class SamplingParamsError(ValueError):
    """A sampling parameter that is not allowed; `field` names it, `value` is what was given."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        shown = repr(value)
        if len(shown) > _MAX_REPR:
            shown = shown[:_MAX_REPR] + "..."
        super().__init__(f"SamplingParams.{field}={shown} is not allowed; use {allowed}")
        self.field = field
        self.value = value


class SamplingParams(msgspec.Struct, kw_only=True, omit_defaults=True):
    n: int = 1
    temperature: float = 1.0  # below SAMPLING_EPS: greedy
    top_p: float = 1.0
    top_k: int = -1  # -1: all tokens
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int | None = 16  # None: up to max_model_len
    min_tokens: int = 0
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    logprobs: int | None = None  # top-n logprobs per generated token, beside the sampled one
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        # types first, so a wrong type is an error that names the field, not a TypeError
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            _check(_is_finite_number(value), name, value, "a number (finite)")
        for name in ("n", "top_k", "max_tokens", "min_tokens", "logprobs", "seed"):
            value = getattr(self, name)
            optional = name in ("max_tokens", "logprobs", "seed")
            _check(_is_int(value) or (optional and value is None), name, value, "an integer")
            _check(value is None or value <= MAX_INT64, name, value, "an integer < 2**63")
        _check(self.n >= 1, "n", self.n, "an integer >= 1")
        _check(self.temperature >= 0.0, "temperature", self.temperature, "a number >= 0")
        _check(0.0 < self.top_p <= 1.0, "top_p", self.top_p, "a number in (0, 1]")
        _check(self.top_k == -1 or self.top_k >= 1, "top_k", self.top_k, "-1 (disabled) or >= 1")
        _check(0.0 <= self.min_p <= 1.0, "min_p", self.min_p, "a number in [0, 1]")
        _check(
            self.max_tokens is None or self.max_tokens >= 1,
            "max_tokens",
            self.max_tokens,
            "an integer >= 1",
        )
        _check(self.min_tokens >= 0, "min_tokens", self.min_tokens, "an integer >= 0")
        if self.max_tokens is not None:
            _check(
                self.min_tokens <= self.max_tokens,
                "min_tokens",
                self.min_tokens,
                f"at most max_tokens={self.max_tokens}",
            )
        _check(
            self.logprobs is None or 0 <= self.logprobs <= MAX_LOGPROBS,
            "logprobs",
            self.logprobs,
            f"an integer in [0, {MAX_LOGPROBS}]",
        )
        _check(
            self.seed is None or 0 <= self.seed < 2**63,
            "seed",
            self.seed,
            "an integer in [0, 2**63)",
        )
        if self.stop is not None:
            _check(
                isinstance(self.stop, list)
                and len(self.stop) <= MAX_STOP_STRINGS
                and all(
                    isinstance(s, str) and 0 < len(s) <= MAX_STOP_STRING_CHARS for s in self.stop
                ),
                "stop",
                self.stop,
                f"a list of at most {MAX_STOP_STRINGS} non-empty strings of at most "
                f"{MAX_STOP_STRING_CHARS} characters",
            )
        if self.stop_token_ids is not None:
            _check(
                isinstance(self.stop_token_ids, list)
                and len(self.stop_token_ids) <= MAX_STOP_TOKEN_IDS
                and all(_is_int(t) and 0 <= t <= MAX_INT64 for t in self.stop_token_ids),
                "stop_token_ids",
                self.stop_token_ids,
                f"a list of at most {MAX_STOP_TOKEN_IDS} token ids >= 0",
            )

    def check_vocab(self, vocab_size: int) -> None:
        """Every token id (and top-n count) these params carry must fit a vocabulary this size;
        out of it, a tensor index in the sampler would fail for the whole batch."""
        bad = next((t for t in self.stop_token_ids or () if t >= vocab_size), None)
        if bad is not None:
            raise SamplingParamsError(
                "stop_token_ids", bad, f"token ids in 0..{vocab_size - 1} (the vocabulary)"
            )
        _check(
            self.logprobs is None or self.logprobs <= vocab_size,
            "logprobs",
            self.logprobs,
            f"at most the vocabulary size {vocab_size}",
        )

    def child(self, index: int) -> SamplingParams:
        """The params of the index-th of n parallel samples: n=1 and a distinct seed, which stays
        in [0, 2**63) (it wraps around rather than leave the range the user's seed was in)."""
        seed = None if self.seed is None else (self.seed + index) % 2**63
        return msgspec.structs.replace(self, n=1, seed=seed)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite_number(value: object) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _check(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise SamplingParamsError(name, value, allowed)

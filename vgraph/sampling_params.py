"""SamplingParams: how one request picks its tokens and when it stops. Validated on construction.

A msgspec Struct so the same object crosses the frontend/engine socket without pickling; msgspec
runs __post_init__ on decode too, so the engine core re-checks what it receives. A bad value
raises SamplingParamsError, a ValueError that carries the field's name (`.field`), so callers
such as the HTTP server name the field without reading the message. What depends on the model
(token ids against the vocabulary) is checked by `check_vocab`, which the frontend and the
engine core both call. What needs the tokenizer or the grammar library (bad_words -> token ids,
a structured-output grammar that compiles) is done by the frontend's InputProcessor.

Neutral values (penalties 0 / 1, no bias, no allowed list, no bad words, no structured output)
leave the logits untouched: the sampler skips every processor no row of a batch asks for.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

MAX_LOGPROBS = 20  # cap on top-n logprobs per token, as vLLM's default max_logprobs
SAMPLING_EPS = 1e-5  # a temperature below this samples greedily (as vLLM)
MAX_STOP_STRINGS = 16  # stop strings per request
MAX_STOP_STRING_CHARS = 1024  # characters per stop string (streams hold back this many - 1)
MAX_STOP_TOKEN_IDS = 1024  # stop_token_ids per request
MAX_INT64 = 2**63 - 1  # integers cross the socket as msgpack int64
MAX_PENALTY = 2.0  # presence / frequency penalties lie in [-2, 2], as OpenAI's
MAX_LOGIT_BIAS = 100.0  # a bias lies in [-100, 100], as OpenAI's
MAX_LOGIT_BIAS_ENTRIES = 1024  # token ids one logit_bias may name
MAX_BAD_WORDS = 128  # bad words per request
MAX_BAD_WORD_CHARS = 256  # characters per bad word
MAX_GRAMMAR_CHARS = 64 * 1024  # characters of a JSON schema, regex or grammar
MAX_CHOICES = 256  # entries of a structured-output choice list
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


class StructuredOutputsParams(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Constrain the output to a JSON schema, a regex, one of some strings, an EBNF grammar or
    any JSON object (vLLM's names). Exactly one is set. A schema given as a dict is kept as its
    JSON text, so the struct crosses the socket as plain strings."""

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.json, dict):
            self.json = json.dumps(self.json)
        kinds = self.kinds()
        _check(
            len(kinds) == 1,
            "structured_outputs",
            kinds,
            "exactly one of json, regex, choice, grammar, json_object",
        )
        for name in ("json", "regex", "grammar"):
            value = getattr(self, name)
            _check(
                value is None or (isinstance(value, str) and 0 < len(value) <= MAX_GRAMMAR_CHARS),
                f"structured_outputs.{name}",
                value,
                f"a non-empty string of at most {MAX_GRAMMAR_CHARS} characters",
            )
        if self.choice is not None:
            _check(
                isinstance(self.choice, list)
                and 0 < len(self.choice) <= MAX_CHOICES
                and all(
                    isinstance(c, str) and 0 < len(c) <= MAX_GRAMMAR_CHARS for c in self.choice
                ),
                "structured_outputs.choice",
                self.choice,
                f"a list of 1 to {MAX_CHOICES} non-empty strings",
            )
        _check(
            self.json_object in (None, True),
            "structured_outputs.json_object",
            self.json_object,
            "true (or leave it out)",
        )

    def kinds(self) -> list[str]:
        """The names of the constraints that are set."""
        names = ("json", "regex", "choice", "grammar", "json_object")
        return [n for n in names if getattr(self, n) not in (None, False)]


class SamplingParams(msgspec.Struct, kw_only=True, omit_defaults=True):
    n: int = 1
    temperature: float = 1.0  # below SAMPLING_EPS: greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 (or 0, read as -1): all tokens
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
    presence_penalty: float = 0.0  # minus this once for every token already in the output
    frequency_penalty: float = 0.0  # minus this times each token's count in the output
    repetition_penalty: float = 1.0  # divides (>0) / multiplies (<0) logits of seen tokens
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit
    allowed_token_ids: list[int] | None = None  # only these may be sampled
    bad_words: list[str] | None = None  # never generated (as their token sequences)
    prompt_logprobs: int | None = None  # top-n logprobs per prompt token
    structured_outputs: StructuredOutputsParams | None = None
    # set by the frontend from bad_words (each word with and without a leading space)
    bad_words_token_ids: list[list[int]] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        # types first, so a wrong type is an error that names the field, not a TypeError
        names = ("temperature", "top_p", "min_p")
        for name in names + ("presence_penalty", "frequency_penalty", "repetition_penalty"):
            value = getattr(self, name)
            _check(_is_finite_number(value), name, value, "a number (finite)")
        ints = ("n", "top_k", "max_tokens", "min_tokens", "logprobs", "prompt_logprobs", "seed")
        for name in ints:
            value = getattr(self, name)
            optional = name in ("max_tokens", "logprobs", "prompt_logprobs", "seed")
            _check(_is_int(value) or (optional and value is None), name, value, "an integer")
            _check(value is None or value <= MAX_INT64, name, value, "an integer < 2**63")
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            value = getattr(self, name)
            _check(isinstance(value, bool), name, value, "true or false")
        _check(
            self.structured_outputs is None
            or isinstance(self.structured_outputs, StructuredOutputsParams),
            "structured_outputs",
            self.structured_outputs,
            "a StructuredOutputsParams",
        )
        _check(self.n >= 1, "n", self.n, "an integer >= 1")
        _check(self.temperature >= 0.0, "temperature", self.temperature, "a number >= 0")
        _check(0.0 < self.top_p <= 1.0, "top_p", self.top_p, "a number in (0, 1]")
        _check(self.top_k >= -1, "top_k", self.top_k, "0 or -1 (disabled), or >= 1")
        if self.top_k == 0:  # vLLM's default spelling of "all tokens" (generation configs use it)
            self.top_k = -1
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
            self.prompt_logprobs is None or 0 <= self.prompt_logprobs <= MAX_LOGPROBS,
            "prompt_logprobs",
            self.prompt_logprobs,
            f"an integer in [0, {MAX_LOGPROBS}]",
        )
        self._check_logits_processors()
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

    def _check_logits_processors(self) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _check(-MAX_PENALTY <= value <= MAX_PENALTY, name, value, "a number in [-2, 2]")
        _check(
            0.0 < self.repetition_penalty <= 1e6,
            "repetition_penalty",
            self.repetition_penalty,
            "a number > 0 (1 is off)",
        )
        if self.logit_bias is not None:
            _check(
                isinstance(self.logit_bias, dict)
                and len(self.logit_bias) <= MAX_LOGIT_BIAS_ENTRIES
                and all(
                    _is_int(t)
                    and 0 <= t <= MAX_INT64
                    and _is_finite_number(b)
                    and -MAX_LOGIT_BIAS <= b <= MAX_LOGIT_BIAS
                    for t, b in self.logit_bias.items()
                ),
                "logit_bias",
                self.logit_bias,
                f"a map of at most {MAX_LOGIT_BIAS_ENTRIES} token ids >= 0 to numbers in "
                "[-100, 100]",
            )
        for name in ("allowed_token_ids",):
            value = getattr(self, name)
            _check(
                value is None
                or (
                    isinstance(value, list)
                    and len(value) > 0
                    and all(_is_int(t) and 0 <= t <= MAX_INT64 for t in value)
                ),
                name,
                value,
                "a non-empty list of token ids >= 0",
            )
        if self.bad_words is not None:
            _check(
                isinstance(self.bad_words, list)
                and len(self.bad_words) <= MAX_BAD_WORDS
                and all(
                    isinstance(w, str) and 0 < len(w) <= MAX_BAD_WORD_CHARS for w in self.bad_words
                ),
                "bad_words",
                self.bad_words,
                f"a list of at most {MAX_BAD_WORDS} non-empty strings of at most "
                f"{MAX_BAD_WORD_CHARS} characters",
            )
        if self.bad_words_token_ids is not None:
            _check(
                isinstance(self.bad_words_token_ids, list)
                and len(self.bad_words_token_ids) <= 2 * MAX_BAD_WORDS
                and all(
                    isinstance(w, list)
                    and 0 < len(w) <= MAX_BAD_WORD_CHARS
                    and all(_is_int(t) and 0 <= t <= MAX_INT64 for t in w)
                    for w in self.bad_words_token_ids
                ),
                "bad_words_token_ids",
                self.bad_words_token_ids,
                "a list of non-empty token id lists",
            )

    @property
    def needs_penalties(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )

    @property
    def needs_host_tokens(self) -> bool:
        """Whether sampling a token needs the request's previous tokens on the host: a bad word's
        ban reads the last ones, a grammar accepts each before the next bitmask, a step that
        scores the prompt reads back. With async scheduling such a request's step samples only
        once the step before has completed (its forward is launched before). Penalties count
        a pending output on the device and min_tokens counts it on the host: they need not."""
        return bool(
            self.bad_words_token_ids
            or self.bad_words
            or self.structured_outputs is not None
            or self.prompt_logprobs is not None
        )

    def check_vocab(self, vocab_size: int) -> None:
        """Every token id (and top-n count) these params carry must fit a vocabulary this size;
        out of it, a tensor index in the sampler would fail for the whole batch."""
        named = {
            "stop_token_ids": self.stop_token_ids or (),
            "logit_bias": self.logit_bias or {},
            "allowed_token_ids": self.allowed_token_ids or (),
            "bad_words_token_ids": [t for w in self.bad_words_token_ids or () for t in w],
        }
        for name, ids in named.items():
            bad = next((t for t in ids if t >= vocab_size), None)
            if bad is not None:
                raise SamplingParamsError(
                    name, bad, f"token ids in 0..{vocab_size - 1} (the vocabulary)"
                )
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            _check(
                value is None or value <= vocab_size,
                name,
                value,
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

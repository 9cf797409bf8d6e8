"""SamplingParams: how one request picks its tokens and when it stops. Validated on construction.

A msgspec Struct so the same object crosses the frontend/engine socket without pickling.
"""

from __future__ import annotations

import msgspec

MAX_LOGPROBS = 20  # cap on top-n logprobs per token, as vLLM's default max_logprobs


class SamplingParams(msgspec.Struct, kw_only=True, omit_defaults=True):
    n: int = 1
    temperature: float = 1.0
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
        # types first, so a wrong type is a ValueError that names the field, not a TypeError
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            _check(_is_number(value), name, value, "a number")
        for name in ("n", "top_k", "max_tokens", "min_tokens", "logprobs", "seed"):
            value = getattr(self, name)
            optional = name in ("max_tokens", "logprobs", "seed")
            _check(_is_int(value) or (optional and value is None), name, value, "an integer")
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
                all(isinstance(s, str) and s for s in self.stop),
                "stop",
                self.stop,
                "a list of non-empty strings",
            )
        if self.stop_token_ids is not None:
            _check(
                all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids),
                "stop_token_ids",
                self.stop_token_ids,
                "a list of token ids >= 0",
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def child(self, index: int) -> SamplingParams:
        """The params of the index-th of n parallel samples: n=1 and a distinct seed."""
        seed = None if self.seed is None else self.seed + index
        return msgspec.structs.replace(self, n=1, seed=seed)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ValueError(f"SamplingParams.{name}={value!r} is not allowed; use {allowed}")

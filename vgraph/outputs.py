"""What the engine returns: RequestOutput with one CompletionOutput per sample and the request's
RequestMetrics for users, and TokenLogprobs, the model runner's per-token logprobs (carried over
the wire as they are)."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec


class TokenLogprobs(msgspec.Struct, array_like=True):
    token_ids: list[int]  # the sampled token first, then the top-n
    logprobs: list[float]
    rank: int  # rank of the sampled token (1 = most likely)


@dataclass
class Logprob:
    logprob: float
    rank: int
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None  # per generated token: token id -> Logprob
    finish_reason: str | None = None  # "stop", "length", "abort", "error"
    stop_reason: int | str | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def extend(self, newer: CompletionOutput) -> None:
        """Append the next delta of the same sample (text, tokens, logprobs; its end wins)."""
        self.text += newer.text
        self.token_ids.extend(newer.token_ids)
        if self.logprobs is not None and newer.logprobs is not None:
            self.logprobs.extend(newer.logprobs)
        self.cumulative_logprob = newer.cumulative_logprob
        self.finish_reason, self.stop_reason = newer.finish_reason, newer.stop_reason


@dataclass
class RequestMetrics:
    """Wall-clock times (time.time(), seconds) of one user request, as vLLM's."""

    arrival_time: float  # when the frontend took it
    first_token_time: float | None = None  # when its first generated token reached the frontend
    last_token_time: float | None = None
    finished_time: float | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = False
    error: str | None = None
    metrics: RequestMetrics | None = None
    num_cached_tokens: int | None = None  # prompt tokens served from the prefix cache
    # per prompt token (None for the first, which nothing predicts): token id -> Logprob;
    # None unless SamplingParams.prompt_logprobs was set (complete once a token was generated)
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None

    def merge_delta(self, newer: RequestOutput) -> None:
        """Fold the next delta output of the same request into this one, as if both had come in
        one step: each sample's text, tokens and logprobs appended; the newer state wins."""
        by_index = {c.index: c for c in self.outputs}
        for comp in newer.outputs:
            if comp.index in by_index:
                by_index[comp.index].extend(comp)
            else:
                self.outputs.append(comp)
                self.outputs.sort(key=lambda c: c.index)
        self.finished = newer.finished
        self.error = newer.error if newer.error is not None else self.error
        self.metrics = newer.metrics
        self.num_cached_tokens = newer.num_cached_tokens
        self.prompt_logprobs = newer.prompt_logprobs

"""POST /v1/completions: prompt(s) -> text_completion (or SSE chunks of it).

A prompt is text, token ids, or a list of either (one engine request per prompt; choice index
= prompt index * n + sample index). max_tokens defaults to 16, capped to what fits the context.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from vgraph.entrypoints.openai.protocol import APIError, CompletionRequest
from vgraph.entrypoints.openai.serving_engine import (
    Choice,
    OpenAIServing,
    finite,
    usage,
)
from vgraph.outputs import CompletionOutput, Logprob
from vgraph.sampling_params import SamplingParams

MAX_PROMPTS = 128
DEFAULT_MAX_TOKENS = 16


class OpenAIServingCompletion(OpenAIServing):
    async def create_completion(
        self, req: CompletionRequest, request_id: str | None = None
    ) -> dict[str, Any] | AsyncIterator[str]:
        """The response body, or (stream=true) an iterator of SSE events. Raises APIError."""
        self.check_request(req)
        prompts = prompt_list(req.prompt)
        self.check_num_seqs(len(prompts), req.n)
        tokenized = [self.prepare_prompt(p, "prompt") for p in prompts]
        params = [
            self.sampling_params(req, req.max_tokens, len(ids), DEFAULT_MAX_TOKENS, req.logprobs)
            for _, ids in tokenized
        ]
        head = self.response_head("cmpl", "text_completion", request_id)
        if req.stream:
            return self.stream(req, tokenized, params, head)
        choices: dict[int, Choice] = {}
        cached: dict[int, int] = {}  # prompt index -> its prompt tokens found cached
        async for i, out in self.generate_all(tokenized, params, head["id"]):
            cached[i] = out.num_cached_tokens or cached.get(i, 0)
            for comp in out.outputs:
                index = i * req.n + comp.index
                self.update_choice(choices.setdefault(index, Choice(index)), comp)
        body = []
        for c in sorted(choices.values(), key=lambda c: c.index):
            lp = None if req.logprobs is None else completion_logprobs(c.token_ids, c.logprobs, 0)
            body.append(
                {
                    "index": c.index,
                    "text": c.text,
                    "logprobs": lp,
                    "finish_reason": c.finish_reason,
                    "stop_reason": c.stop_reason,
                }
            )
        num_completion = sum(len(c.token_ids) for c in choices.values())
        return {
            **head,
            "choices": body,
            "usage": usage(
                sum(len(ids) for _, ids in tokenized), num_completion, sum(cached.values())
            ),
        }

    def stream(
        self,
        req: CompletionRequest,
        tokenized: list[tuple[str | None, list[int]]],
        params: list[SamplingParams],
        head: dict[str, Any],
    ) -> AsyncIterator[str]:
        text_len: dict[int, int] = {}  # choice index -> characters sent (the logprobs offset)

        def make_choice(i: int, comp: CompletionOutput) -> dict[str, Any]:
            index = i * req.n + comp.index
            offset = text_len.get(index, 0)
            text_len[index] = offset + len(comp.text)
            lp = None
            if req.logprobs is not None:
                lp = completion_logprobs(comp.token_ids, comp.logprobs or [], offset)
            return {
                "index": index,
                "text": comp.text,
                "logprobs": lp,
                "finish_reason": comp.finish_reason,
                "stop_reason": comp.stop_reason,
            }

        return self.stream_events(head, tokenized, params, req.stream_options, make_choice)


def prompt_list(prompt: str | list[int] | list[str] | list[list[int]]) -> list[str | list[int]]:
    """One prompt or a batch -> list of prompts (text or token ids)."""
    if isinstance(prompt, str) or not prompt or isinstance(prompt[0], int):
        return [prompt]
    if len(prompt) > MAX_PROMPTS:
        raise APIError(
            f"prompt is a batch of {len(prompt)} prompts; at most {MAX_PROMPTS} are "
            f"allowed per request",
            param="prompt",
        )
    return list(prompt)


def completion_logprobs(
    token_ids: list[int], logprobs: list[dict[int, Logprob]], text_offset: int
) -> dict[str, list[Any]]:
    """The legacy completions logprobs object for these tokens."""
    tokens, token_logprobs, top, offsets = [], [], [], []
    for tid, entries in zip(token_ids, logprobs):
        sampled = entries.get(tid)
        text = (sampled.decoded_token if sampled else None) or ""
        tokens.append(text)
        token_logprobs.append(finite(sampled.logprob) if sampled else None)
        top.append({(lp.decoded_token or ""): finite(lp.logprob) for lp in entries.values()})
        offsets.append(text_offset)
        text_offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    }

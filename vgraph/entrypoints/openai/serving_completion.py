"""POST /v1/completions: prompt(s) -> text_completion (or SSE chunks of it).

A prompt is text, token ids, or a list of either (one engine request per prompt; choice index
= prompt index * n + sample index). max_tokens defaults to 16, capped to what fits the context.
echo: each choice's text starts with its prompt (decoded, for token ids); with logprobs the
prompt's tokens lead the logprobs too (the first with logprob None), scored by prompt_logprobs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from vgraph.entrypoints.openai.protocol import APIError, CompletionRequest
from vgraph.entrypoints.openai.serving_engine import (
    Choice,
    OpenAIServing,
    finite,
    prompt_logprobs_json,
    token_text,
    usage,
)
from vgraph.outputs import CompletionOutput, Logprob, RequestOutput
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
        tokenized = [self.prepare_prompt(p, "prompt", req, req.add_special_tokens) for p in prompts]
        prompt_lp = req.prompt_logprobs
        if req.echo and req.logprobs is not None:  # the echoed prompt carries logprobs too
            prompt_lp = max(req.logprobs, prompt_lp or 0)
        # echo_only: one token is sampled (the engine generates at least one) and left out
        max_tokens = 1 if req.echo_only else req.max_tokens
        params = [
            self.sampling_params(
                req, max_tokens, len(ids), DEFAULT_MAX_TOKENS, req.logprobs, prompt_lp
            )
            for _, ids in tokenized
        ]
        head = self.response_head("cmpl", "text_completion", request_id)
        if req.stream:
            return self.stream(req, tokenized, params, head)
        choices: dict[int, Choice] = {}
        cached: dict[int, int] = {}  # prompt index -> its prompt tokens found cached
        outputs: dict[int, RequestOutput] = {}
        async for i, out in self.generate_all(tokenized, params, head["id"], req.cache_salt):
            cached[i] = out.num_cached_tokens or cached.get(i, 0)
            outputs[i] = out
            for comp in out.outputs:
                index = i * req.n + comp.index
                self.update_choice(choices.setdefault(index, Choice(index)), comp)
        body = []
        for c in sorted(choices.values(), key=lambda c: c.index):
            i = c.index // req.n
            out = outputs[i]
            text, token_ids, entries = c.text, c.token_ids, c.logprobs
            if req.echo_only:
                text, token_ids, entries = "", [], []
            if req.echo:
                text = self.prompt_text(tokenized[i]) + text
                token_ids = out.prompt_token_ids + token_ids
                entries = [*(out.prompt_logprobs or []), *entries]
            lp = None
            if req.logprobs is not None:
                lp = completion_logprobs(
                    token_ids, entries, 0, self.decode, req.return_tokens_as_token_ids
                )
            choice = {
                "index": c.index,
                "text": text,
                "logprobs": lp,
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
            }
            if req.prompt_logprobs is not None:
                choice["prompt_logprobs"] = prompt_logprobs_json(out.prompt_logprobs)
            body.append(choice)
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
        latest: dict[int, RequestOutput] = {}  # prompt index -> the output being streamed

        def make_choice(i: int, comp: CompletionOutput) -> dict[str, Any]:
            index = i * req.n + comp.index
            first = index not in text_len
            offset = text_len.get(index, 0)
            text, token_ids, entries = comp.text, comp.token_ids, comp.logprobs or []
            if req.echo_only:
                text, token_ids, entries = "", [], []
            if req.echo and first:  # the prompt leads the choice's first chunk
                text = self.prompt_text(tokenized[i]) + text
                token_ids = latest[i].prompt_token_ids + token_ids
                entries = [*(latest[i].prompt_logprobs or []), *entries]
            text_len[index] = offset + len(text)
            lp = None
            if req.logprobs is not None:
                lp = completion_logprobs(
                    token_ids, entries, offset, self.decode, req.return_tokens_as_token_ids
                )
            choice = {
                "index": index,
                "text": text,
                "logprobs": lp,
                "finish_reason": comp.finish_reason,
                "stop_reason": comp.stop_reason,
            }
            if req.prompt_logprobs is not None and first:
                choice["prompt_logprobs"] = prompt_logprobs_json(latest[i].prompt_logprobs)
            return choice

        return self.stream_events(
            head,
            tokenized,
            params,
            req.stream_options,
            make_choice,
            on_output=latest.__setitem__,
            cache_salt=req.cache_salt,
        )

    def prompt_text(self, prompt: tuple[str | None, list[int]]) -> str:
        """The prompt as echoed: its text, or its token ids decoded."""
        text, ids = prompt
        return self.decode(ids) if text is None else text

    def decode(self, token_ids: list[int]) -> str:
        tokenizer = self.engine.tokenizer
        return "" if tokenizer is None else tokenizer.decode(token_ids)


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
    token_ids: list[int],
    logprobs: list[dict[int, Logprob] | None],
    text_offset: int,
    decode: Callable[[list[int]], str] | None = None,
    as_ids: bool = False,
) -> dict[str, list[Any]]:
    """The legacy completions logprobs object for these tokens (an echoed prompt's first token
    has no entries: logprob and top_logprobs None, as OpenAI's). as_ids: tokens as
    "token_id:N" (return_tokens_as_token_ids)."""
    tokens, token_logprobs, top, offsets = [], [], [], []
    for tid, entries in zip(token_ids, logprobs):
        sampled = None if entries is None else entries.get(tid)
        text = token_text(tid, sampled, as_ids)
        if sampled is None and decode is not None and not as_ids:
            text = decode([tid])
        tokens.append(text)
        token_logprobs.append(finite(sampled.logprob) if sampled else None)
        top.append(
            None
            if entries is None
            else {token_text(t, lp, as_ids): finite(lp.logprob) for t, lp in entries.items()}
        )
        offsets.append(text_offset)
        text_offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    }

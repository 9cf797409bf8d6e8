"""What the completion and chat handlers share: checks, prompt limits, choice bookkeeping, the
SSE stream loop.

OpenAIServing turns a user's mistake into an APIError (400/404), engine death into 503, and runs
one engine generator per prompt, merged, closing them all (which aborts unfinished requests in
the core) however the handler ends. It must not know about HTTP routing or auth (server.py).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from vgraph.engine.async_llm import AsyncLLM
from vgraph.engine.client import EngineDeadError
from vgraph.engine.input_processor import PromptType
from vgraph.entrypoints.openai.protocol import (
    APIError,
    SamplingRequest,
    StreamOptions,
    check_model,
)
from vgraph.outputs import CompletionOutput, Logprob, RequestOutput
from vgraph.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputsParams

SSE_DONE = "data: [DONE]\n\n"
DEFAULT_MAX_SEQS_PER_REQUEST = 256  # prompts x n of one request (--max-seqs-per-request)
_DONE = object()


def sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def finite(x: float) -> float:
    """JSON has no -inf: a logprob of -inf is reported as -9999.0 (as vLLM does)."""
    return x if math.isfinite(x) else -9999.0


def prompt_logprobs_json(
    prompt_logprobs: list[dict[int, Logprob] | None] | None,
) -> list[dict[str, dict[str, Any]] | None] | None:
    """vLLM's `prompt_logprobs`: per prompt token None (the first) or token id -> logprob."""
    if prompt_logprobs is None:
        return None
    return [
        None
        if entries is None
        else {
            str(tid): {
                "logprob": finite(lp.logprob),
                "rank": lp.rank,
                "decoded_token": lp.decoded_token,
            }
            for tid, lp in entries.items()
        }
        for entries in prompt_logprobs
    ]


def token_text(token_id: int, lp: Logprob | None, as_id: bool = False) -> str:
    """A token as logprobs show it: its decoded text, or "token_id:N" (vLLM's
    return_tokens_as_token_ids, for tokens whose text is not valid UTF-8 on its own)."""
    if as_id:
        return f"token_id:{token_id}"
    return (lp.decoded_token if lp else None) or ""


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage object; cached_tokens: prompt tokens served from the prefix cache."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


@dataclass
class Choice:
    """One output choice (prompt i, sample j) as it accumulates."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, Logprob]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class OpenAIServing:
    def __init__(
        self,
        engine: AsyncLLM,
        model_name: str,
        max_seqs_per_request: int = DEFAULT_MAX_SEQS_PER_REQUEST,
        default_sampling: dict[str, Any] | None = None,
    ) -> None:
        self.engine = engine
        self.default_sampling = default_sampling or {}  # the model's generation config
        self.model_name = model_name
        self.max_model_len = engine.config.model_config.max_model_len
        self.vocab_size = engine.config.model_config.vocab_size
        self.max_seqs_per_request = max_seqs_per_request

    def response_head(
        self, id_prefix: str, object_type: str, request_id: str | None = None
    ) -> dict[str, Any]:
        """The fields every response body and stream chunk starts with; request_id: the
        client's X-Request-Id (default: a fresh one)."""
        return {
            "id": f"{id_prefix}-{request_id or uuid.uuid4().hex}",
            "object": object_type,
            "created": int(time.time()),
            "model": self.model_name,
        }

    def check_request(self, req: SamplingRequest) -> None:
        check_model(req.model, self.engine.config.model_config.names)
        req.check_unsupported()
        if self.engine.is_dead:
            raise APIError(f"the engine is dead: {self.engine.dead_error}", 503, code="engine_dead")

    def check_num_seqs(self, num_prompts: int, n: int) -> None:
        """One request may ask for at most max_seqs_per_request sequences (prompts x n): each is
        a sequence in the engine, and a few bytes of JSON must not buy minutes of its time."""
        if num_prompts * n > self.max_seqs_per_request:
            raise APIError(
                f"this request asks for {num_prompts} prompt(s) x n={n} = {num_prompts * n} "
                f"sequences; at most {self.max_seqs_per_request} are allowed per request "
                "(--max-seqs-per-request)",
                param="n",
                code="too_many_sequences",
            )

    def prepare_prompt(
        self, prompt: PromptType, param: str, req: SamplingRequest, add_special_tokens: bool
    ) -> tuple[str | None, list[int]]:
        """(text or None, token ids) of a prompt that leaves room to generate, tokenized as
        the request asks (add_special_tokens, truncate_prompt_tokens); a user's mistake is an
        APIError (400) naming the request's field `param`."""
        truncate = req.truncate_prompt_tokens
        if truncate is not None and not (truncate == -1 or 1 <= truncate <= self.max_model_len):
            raise APIError(
                f"truncate_prompt_tokens={truncate} is not allowed; use -1 (the model's maximum "
                f"context length) or 1..{self.max_model_len} (the prompt's last tokens to keep)",
                param="truncate_prompt_tokens",
            )
        try:
            text, ids = self.engine.processor.process_prompt(prompt, add_special_tokens, truncate)
        except ValueError as e:
            raise APIError(str(e), param=param) from None
        if len(ids) >= self.max_model_len:
            raise APIError(
                f"prompt has {len(ids)} tokens, which leaves no room to generate: "
                f"this model's maximum context length is {self.max_model_len} tokens",
                param=param,
            )
        return text, ids

    def sampling_params(
        self,
        req: SamplingRequest,
        max_tokens: int | None,
        prompt_len: int,
        default_max: int | None,
        logprobs: int | None,
        prompt_logprobs: int | None = None,
        structured_outputs: StructuredOutputsParams | None = None,
    ) -> SamplingParams:
        """max_tokens: as requested (None: default_max, else all that fits), and at most the
        generation config's max_new_tokens, as in vLLM. A structured-output grammar that does
        not parse is a 400 here, before anything is queued."""
        room = self.max_model_len - prompt_len
        if max_tokens is None:
            max_tokens = room if default_max is None else min(default_max, room)
        elif prompt_len + max_tokens > self.max_model_len:
            raise APIError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {prompt_len + max_tokens} tokens ({prompt_len} in the prompt, "
                f"{max_tokens} in the completion). Reduce the prompt or "
                f"{req.max_tokens_field()}.",
                param=req.max_tokens_field(),
            )
        max_tokens = min(max_tokens, self.default_sampling.get("max_tokens", max_tokens))
        params = req.sampling_params(
            max_tokens, logprobs, self.default_sampling, prompt_logprobs, structured_outputs
        )
        try:
            params.check_vocab(self.vocab_size)
            if params.structured_outputs is not None:
                from vgraph.structured_output.grammar import check_grammar

                check_grammar(params.structured_outputs)
        except SamplingParamsError as e:
            field = e.field
            if field.startswith("structured_outputs."):  # the request field that set it
                source = req.structured_outputs_field()
                field = field if source == "structured_outputs" else source
            raise APIError(str(e), param=field) from None
        except ValueError as e:  # the grammar library is missing
            raise APIError(str(e), param=req.structured_outputs_field()) from None
        return params

    async def generate_all(
        self,
        prompts: list[tuple[str | None, list[int]]],
        params: list[SamplingParams],
        request_id: str,
        cache_salt: str | None = None,
    ) -> AsyncIterator[tuple[int, RequestOutput]]:
        """(prompt index, delta output) of every prompt, merged; errors become APIErrors.
        request_id: the response's id; the engine's ids add a random suffix (as vLLM's), since
        clients may send one X-Request-Id with concurrent requests. cache_salt: the request's
        (vLLM's), for every prompt of it."""
        request_id = f"{request_id}-{uuid.uuid4().hex[:8]}"
        gens = [
            self.engine.generate_tokenized(
                text, ids, p, f"{request_id}-{i}", request_id, cache_salt
            )
            for i, ((text, ids), p) in enumerate(zip(prompts, params))
        ]
        try:
            async for i, out in merge_async_iterators(gens):
                if out.error is not None:  # bad input the frontend let through: this request
                    raise APIError(out.error)
                yield i, out
        except EngineDeadError as e:
            raise APIError(f"the engine is dead: {e}", 503, code="engine_dead") from None
        except ValueError as e:
            raise APIError(str(e)) from None

    async def stream_events(
        self,
        head: dict[str, Any],
        prompts: list[tuple[str | None, list[int]]],
        params: list[SamplingParams],
        stream_options: StreamOptions | None,
        make_choice: Callable[[int, CompletionOutput], dict[str, Any]],
        first_choices: Sequence[dict[str, Any]] = (),
        on_output: Callable[[int, RequestOutput], None] | None = None,
        cache_salt: str | None = None,
    ) -> AsyncIterator[str]:
        """The SSE events of a streamed response.

        A chunk per entry of first_choices, then one per delta output, its choice object made by
        make_choice(prompt index, delta) (after on_output(prompt index, output), if given,
        sees the output it came in); usage at the end (include_usage) and, with it,
        continuous_usage_stats on every chunk (vLLM's rule); an error after the stream began
        becomes an error event; `data: [DONE]` last, always. cache_salt: as generate_all's.
        """
        num_prompt = sum(len(ids) for _, ids in prompts)
        num_completion = 0
        cached: dict[int, int] = {}  # prompt index -> its prompt tokens found cached
        include_usage = stream_options is not None and stream_options.include_usage
        continuous = include_usage and stream_options.continuous_usage_stats
        for choice in first_choices:
            chunk = {**head, "choices": [choice]}
            if continuous:
                chunk["usage"] = usage(num_prompt, 0, 0)
            yield sse(chunk)
        try:
            async for i, out in self.generate_all(prompts, params, head["id"], cache_salt):
                cached[i] = out.num_cached_tokens or cached.get(i, 0)
                if on_output is not None:
                    on_output(i, out)
                for comp in out.outputs:
                    num_completion += len(comp.token_ids)
                    chunk = {**head, "choices": [make_choice(i, comp)]}
                    if continuous:
                        chunk["usage"] = usage(num_prompt, num_completion, sum(cached.values()))
                    yield sse(chunk)
            if include_usage:
                final = usage(num_prompt, num_completion, sum(cached.values()))
                yield sse({**head, "choices": [], "usage": final})
        except APIError as e:
            yield sse(e.body())
        yield SSE_DONE

    @staticmethod
    def update_choice(choice: Choice, comp: CompletionOutput) -> None:
        choice.text += comp.text
        choice.token_ids.extend(comp.token_ids)
        if comp.logprobs:
            choice.logprobs.extend(comp.logprobs)
        if comp.finish_reason is not None:
            choice.finish_reason, choice.stop_reason = comp.finish_reason, comp.stop_reason


async def merge_async_iterators(
    iterators: list[AsyncIterator[Any]],
) -> AsyncIterator[tuple[int, Any]]:
    """Items of all iterators as (iterator index, item), as they come; all are closed at the end
    (an engine generator aborts its request when closed early)."""
    if len(iterators) == 1:
        async with aclosing(iterators[0]) as it:
            async for item in it:
                yield 0, item
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def drain(i: int, it: AsyncIterator[Any]) -> None:
        try:
            async with aclosing(it):
                async for item in it:
                    queue.put_nowait((i, item))
        except Exception as e:  # noqa: BLE001 - handed to the consumer
            queue.put_nowait((i, e))
        finally:
            queue.put_nowait((i, _DONE))

    tasks = [asyncio.create_task(drain(i, it)) for i, it in enumerate(iterators)]
    try:
        remaining = len(tasks)
        while remaining:
            i, item = await queue.get()
            if item is _DONE:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield i, item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

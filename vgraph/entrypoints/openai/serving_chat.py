"""POST /v1/chat/completions: messages -> chat template -> chat.completion (or SSE chunks).

The prompt is rendered with the tokenizer's chat template exactly as `LLM.chat` does, so a greedy
request answers as the offline API. max_tokens (or max_completion_tokens) defaults to all that
fits the context.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from vgraph.entrypoints.openai.protocol import APIError, ChatCompletionRequest
from vgraph.entrypoints.openai.serving_engine import (
    SSE_DONE,
    Choice,
    OpenAIServing,
    finite,
    sse,
    usage,
)
from vgraph.outputs import Logprob
from vgraph.sampling_params import SamplingParams


class OpenAIServingChat(OpenAIServing):
    async def create_chat_completion(
        self, req: ChatCompletionRequest
    ) -> dict[str, Any] | AsyncIterator[str]:
        """The response body, or (stream=true) an iterator of SSE events. Raises APIError."""
        self.check_request(req)
        self.check_num_seqs(1, req.n)
        text, ids = self.tokenize(self.render(req), "messages")
        top_n = (req.top_logprobs or 0) if req.logprobs else None
        params = self.sampling_params(
            req, req.max_completion_tokens or req.max_tokens, len(ids), None, top_n
        )
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
        }
        if req.stream:
            return self.stream(req, (text, ids), params, head, top_n)
        choices: dict[int, Choice] = {}
        async for _, out in self.generate_all([(text, ids)], [params], head["id"]):
            for comp in out.outputs:
                self.update_choice(choices.setdefault(comp.index, Choice(comp.index)), comp)
        body = [
            {
                "index": c.index,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": None
                if top_n is None
                else logprobs_block(c.token_ids, c.logprobs, top_n),
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
            }
            for c in sorted(choices.values(), key=lambda c: c.index)
        ]
        num_completion = sum(len(c.token_ids) for c in choices.values())
        return {**head, "choices": body, "usage": usage(len(ids), num_completion)}

    def render(self, req: ChatCompletionRequest) -> str:
        tokenizer = self.engine.tokenizer
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise APIError("this model has no chat template; use /v1/completions", param="messages")
        messages = [{"role": m.role, "content": m.text()} for m in req.messages]
        try:
            return tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=req.add_generation_prompt
            )
        except Exception as e:  # noqa: BLE001 - a template that rejects these messages
            raise APIError(
                f"the chat template rejected the messages: {e}", param="messages"
            ) from None

    async def stream(
        self,
        req: ChatCompletionRequest,
        prompt: tuple[str | None, list[int]],
        params: SamplingParams,
        head: dict[str, Any],
        top_n: int | None,
    ) -> AsyncIterator[str]:
        head = {**head, "object": "chat.completion.chunk"}
        opts = req.stream_options
        num_completion = 0
        for j in range(req.n):
            yield sse(
                {
                    **head,
                    "choices": [
                        {
                            "index": j,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                }
            )
        try:
            async for _, out in self.generate_all([prompt], [params], head["id"]):
                for comp in out.outputs:
                    num_completion += len(comp.token_ids)
                    lp = None
                    if top_n is not None:
                        lp = logprobs_block(comp.token_ids, comp.logprobs or [], top_n)
                    chunk = {
                        **head,
                        "choices": [
                            {
                                "index": comp.index,
                                "delta": {"content": comp.text},
                                "logprobs": lp,
                                "finish_reason": comp.finish_reason,
                                "stop_reason": comp.stop_reason,
                            }
                        ],
                    }
                    if opts is not None and opts.continuous_usage_stats:
                        chunk["usage"] = usage(len(prompt[1]), num_completion)
                    yield sse(chunk)
            if opts is not None and opts.include_usage:
                yield sse({**head, "choices": [], "usage": usage(len(prompt[1]), num_completion)})
        except APIError as e:
            yield sse(e.body())
        yield SSE_DONE


def logprobs_block(
    token_ids: list[int], logprobs: list[dict[int, Logprob]], top_n: int
) -> dict[str, list[dict[str, Any]]]:
    """The chat logprobs object: per token its logprob and the top_n most likely tokens."""

    def entry(lp: Logprob | None) -> dict[str, Any]:
        token = (lp.decoded_token if lp else None) or ""
        return {
            "token": token,
            "logprob": finite(lp.logprob) if lp else -9999.0,
            "bytes": list(token.encode("utf-8")),
        }

    content = []
    for tid, entries in zip(token_ids, logprobs):
        top = sorted((lp for lp in entries.values() if lp.rank <= top_n), key=lambda lp: lp.rank)
        content.append({**entry(entries.get(tid)), "top_logprobs": [entry(lp) for lp in top]})
    return {"content": content}

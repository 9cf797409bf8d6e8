"""POST /v1/chat/completions: messages -> chat template -> chat.completion (or SSE chunks).

The prompt is rendered with the tokenizer's chat template exactly as `LLM.chat` does, so a greedy
request answers as the offline API. max_tokens (or max_completion_tokens) defaults to all that
fits the context.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from vgraph.entrypoints.openai.protocol import APIError, ChatCompletionRequest
from vgraph.entrypoints.openai.serving_engine import (
    Choice,
    OpenAIServing,
    finite,
    usage,
)
from vgraph.outputs import CompletionOutput, Logprob
from vgraph.sampling_params import SamplingParams


class OpenAIServingChat(OpenAIServing):
    async def create_chat_completion(
        self, req: ChatCompletionRequest
    ) -> dict[str, Any] | AsyncIterator[str]:
        """The response body, or (stream=true) an iterator of SSE events. Raises APIError."""
        self.check_request(req)
        self.check_num_seqs(1, req.n)
        text, ids = self.prepare_prompt(self.render(req), "messages")
        top_n = (req.top_logprobs or 0) if req.logprobs else None
        params = self.sampling_params(
            req, req.max_completion_tokens or req.max_tokens, len(ids), None, top_n
        )
        head = self.response_head("chatcmpl", "chat.completion")
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
                else chat_logprobs(c.token_ids, c.logprobs, top_n),
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

    def stream(
        self,
        req: ChatCompletionRequest,
        prompt: tuple[str | None, list[int]],
        params: SamplingParams,
        head: dict[str, Any],
        top_n: int | None,
    ) -> AsyncIterator[str]:
        """SSE events: first a chunk per choice that gives the role (as OpenAI does)."""
        role = {"role": "assistant", "content": ""}
        first = [
            {"index": j, "delta": role, "logprobs": None, "finish_reason": None}
            for j in range(req.n)
        ]

        def make_choice(_: int, comp: CompletionOutput) -> dict[str, Any]:
            lp = None
            if top_n is not None:
                lp = chat_logprobs(comp.token_ids, comp.logprobs or [], top_n)
            return {
                "index": comp.index,
                "delta": {"content": comp.text},
                "logprobs": lp,
                "finish_reason": comp.finish_reason,
                "stop_reason": comp.stop_reason,
            }

        head = {**head, "object": "chat.completion.chunk"}
        return self.stream_events(head, [prompt], [params], req.stream_options, make_choice, first)


def chat_logprobs(
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

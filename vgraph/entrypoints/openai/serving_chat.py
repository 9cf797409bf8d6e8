"""POST /v1/chat/completions: messages -> chat template -> chat.completion (or SSE chunks).

The prompt is rendered with the tokenizer's chat template exactly as `LLM.chat` does, so a greedy
request answers as the offline API: the template writes the special tokens (add_special_tokens
adds the tokenizer's too), a new assistant turn or, with continue_final_message, the last message
left open (a prefilled reply). echo: the reply starts with the last message if it is the
assistant's. max_tokens (or max_completion_tokens) defaults to all that fits the context. Tools
(tools, tool_choice, the tool role, earlier tool_calls) go to the template; tool calls in the
output are read back by tool_parsers.py into `tool_calls` with finish_reason "tool_calls".
tool_choice "required" or a named function is forced through structured outputs: the output must
follow the schema tool_parsers.forced_tool_schema builds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec

from vgraph.entrypoints.openai.protocol import APIError, ChatCompletionRequest
from vgraph.entrypoints.openai.serving_engine import (
    Choice,
    OpenAIServing,
    finite,
    prompt_logprobs_json,
    token_text,
    usage,
)
from vgraph.entrypoints.openai.serving_tokenization import render_messages
from vgraph.entrypoints.openai.tool_parsers import (
    ToolParser,
    forced_tool_schema,
    parse_forced_tool_calls,
)
from vgraph.outputs import CompletionOutput, Logprob, RequestOutput
from vgraph.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputsParams


class OpenAIServingChat(OpenAIServing):
    def __init__(
        self,
        *args: Any,
        tool_parser: ToolParser | None = None,
        trust_request_chat_template: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.tool_parser = tool_parser  # for tool_choice "auto"; None: calls stay text
        self.trust_request_chat_template = trust_request_chat_template

    async def create_chat_completion(
        self, req: ChatCompletionRequest, request_id: str | None = None
    ) -> dict[str, Any] | AsyncIterator[str]:
        """The response body, or (stream=true) an iterator of SSE events. Raises APIError."""
        self.check_request(req)
        self.check_num_seqs(1, req.n)
        text, ids = self.prepare_prompt(
            render_messages(self.engine.tokenizer, req, self.trust_request_chat_template),
            "messages",
            req,
            req.add_special_tokens,
        )
        top_n = (req.top_logprobs or 0) if req.logprobs else None
        params = self.sampling_params(
            req, req.max_completion_tokens or req.max_tokens, len(ids), None, top_n
        )
        tools = self.tool_output(req)
        if isinstance(tools, dict):
            params = self.force_tool_schema(params, tools)
        head = self.response_head("chatcmpl", "chat.completion", request_id)
        if req.stream:
            return self.stream(req, (text, ids), params, head, top_n, tools)
        choices: dict[int, Choice] = {}
        num_cached = 0
        prompt_lps = None
        async for _, out in self.generate_all([(text, ids)], [params], head["id"], req.cache_salt):
            num_cached = out.num_cached_tokens or num_cached
            prompt_lps = out.prompt_logprobs
            for comp in out.outputs:
                self.update_choice(choices.setdefault(comp.index, Choice(comp.index)), comp)
        body = []
        for c in sorted(choices.values(), key=lambda c: c.index):
            message, finish_reason = assistant_message(req, c.text, tools), c.finish_reason
            if req.echoed():
                message["content"] = req.echoed() + (message["content"] or "")
            if message.get("tool_calls"):
                finish_reason = "tool_calls"
            body.append(
                {
                    "index": c.index,
                    "message": message,
                    "logprobs": None
                    if top_n is None
                    else chat_logprobs(
                        c.token_ids, c.logprobs, top_n, req.return_tokens_as_token_ids
                    ),
                    "finish_reason": finish_reason,
                    "stop_reason": c.stop_reason,
                }
            )
        num_completion = sum(len(c.token_ids) for c in choices.values())
        response = {**head, "choices": body, "usage": usage(len(ids), num_completion, num_cached)}
        if req.prompt_logprobs is not None:
            response["prompt_logprobs"] = prompt_logprobs_json(prompt_lps)
        return response

    def tool_output(self, req: ChatCompletionRequest) -> ToolParser | dict[str, Any] | None:
        """How the output holds tool calls: a parser (tool_choice "auto"), the JSON schema it
        is forced to ("required" or a named function), or None (no tools, or "none")."""
        schema = forced_tool_schema(req)
        if schema is not None:
            return schema
        return self.tool_parser if req.resolved_tool_choice() == "auto" else None

    def force_tool_schema(self, params: SamplingParams, schema: dict[str, Any]) -> SamplingParams:
        """The params whose output must follow `schema` (tool_choice "required" or a named
        function), as a structured-output JSON schema in place of any other constraint."""
        so = StructuredOutputsParams(json=schema)
        try:
            from vgraph.structured_output.grammar import check_grammar

            check_grammar(so)
        except SamplingParamsError as e:
            raise APIError(str(e), param="tools") from None
        except ValueError as e:  # the grammar library is missing
            raise APIError(str(e), param="tool_choice") from None
        return msgspec.structs.replace(params, structured_outputs=so)

    def stream(
        self,
        req: ChatCompletionRequest,
        prompt: tuple[str | None, list[int]],
        params: SamplingParams,
        head: dict[str, Any],
        top_n: int | None,
        tools: ToolParser | dict[str, Any] | None,
    ) -> AsyncIterator[str]:
        """SSE events: first a chunk per choice that gives the role (as OpenAI does), then one
        with the echoed message (echo). With tools, text that may be a call is held back; the
        calls come whole in the last chunk. prompt_logprobs ride on each choice's first chunk
        of output, as in a streamed completion."""
        role = {"role": "assistant", "content": ""}
        first = [
            {"index": j, "delta": role, "logprobs": None, "finish_reason": None}
            for j in range(req.n)
        ]
        if req.echoed():  # the echoed last message, before anything generated
            echo = {"content": req.echoed()}
            first += [
                {"index": j, "delta": echo, "logprobs": None, "finish_reason": None}
                for j in range(req.n)
            ]
        texts: dict[int, str] = {}  # choice index -> whole text so far
        sent: dict[int, int] = {}  # choice index -> characters sent as content
        latest: dict[int, RequestOutput] = {}  # the output being streamed (one prompt: index 0)
        scored: set[int] = set()  # choice indices whose chunk carried the prompt logprobs

        def make_choice(_: int, comp: CompletionOutput) -> dict[str, Any]:
            lp = None
            if top_n is not None:
                lp = chat_logprobs(
                    comp.token_ids, comp.logprobs or [], top_n, req.return_tokens_as_token_ids
                )
            delta: dict[str, Any] = {"content": comp.text}
            finish_reason = comp.finish_reason
            if tools is not None:
                text = texts[comp.index] = texts.get(comp.index, "") + comp.text
                start = sent.get(comp.index, 0)
                if comp.finish_reason is None:
                    end = tools.content_end(text) if isinstance(tools, ToolParser) else 0
                    sent[comp.index] = max(start, end)
                    delta = {"content": text[start : sent[comp.index]]}
                else:
                    message = assistant_message(req, text, tools)
                    delta = {"content": text[start:]}
                    if message.get("tool_calls"):
                        calls = enumerate(message["tool_calls"])
                        delta = {"tool_calls": [{"index": i, **call} for i, call in calls]}
                        finish_reason = "tool_calls"
            choice = {
                "index": comp.index,
                "delta": delta,
                "logprobs": lp,
                "finish_reason": finish_reason,
                "stop_reason": comp.stop_reason,
            }
            if req.prompt_logprobs is not None and comp.index not in scored:
                scored.add(comp.index)
                choice["prompt_logprobs"] = prompt_logprobs_json(latest[0].prompt_logprobs)
            return choice

        head = {**head, "object": "chat.completion.chunk"}
        return self.stream_events(
            head,
            [prompt],
            [params],
            req.stream_options,
            make_choice,
            first,
            on_output=latest.__setitem__,
            cache_salt=req.cache_salt,
        )


def assistant_message(
    req: ChatCompletionRequest, text: str, tools: ToolParser | dict[str, Any] | None
) -> dict[str, Any]:
    """The reply as an OpenAI assistant message: content, or tool calls found in the text."""
    calls = []
    content: str | None = text
    if isinstance(tools, ToolParser):
        content, calls = tools.extract(text)
    elif tools is not None:
        calls = parse_forced_tool_calls(req, text)
        content = None if calls else text
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [c.openai() for c in calls]
    return message


def chat_logprobs(
    token_ids: list[int], logprobs: list[dict[int, Logprob]], top_n: int, as_ids: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """The chat logprobs object: per token its logprob and the top_n most likely tokens.
    as_ids (return_tokens_as_token_ids): each token as "token_id:N", as vLLM's."""

    def entry(tid: int, lp: Logprob | None) -> dict[str, Any]:
        token = token_text(tid, lp, as_ids)
        return {
            "token": token,
            "logprob": finite(lp.logprob) if lp else -9999.0,
            "bytes": list(token.encode("utf-8")),
        }

    content = []
    for tid, entries in zip(token_ids, logprobs):
        top = sorted(
            ((t, lp) for t, lp in entries.items() if lp.rank <= top_n), key=lambda e: e[1].rank
        )
        content.append(
            {**entry(tid, entries.get(tid)), "top_logprobs": [entry(t, lp) for t, lp in top]}
        )
    return {"content": content}

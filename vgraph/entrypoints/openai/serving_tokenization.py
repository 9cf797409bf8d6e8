"""POST /tokenize and POST /detokenize, as vLLM serves them (outside /v1, as there).

/tokenize takes a `prompt` (text; special tokens added as for a completion) or chat `messages`
(rendered by the chat template exactly as /v1/chat/completions renders them, tools included)
and answers {count, max_model_len, tokens, token_strs}. /detokenize takes `tokens` and answers
{prompt}. Neither runs the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from vgraph.entrypoints.chat_utils import ChatTemplateError, render_chat, request_chat_template
from vgraph.entrypoints.openai.protocol import (
    MAX_TOOLS,
    APIError,
    ChatCompletionRequest,
    ChatMessage,
    Int64,
    StrictModel,
    Tool,
    check_model,
)


class TokenizeRequest(StrictModel):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None  # default: True for a prompt, False for messages
    add_generation_prompt: bool | None = None  # default: true unless continue_final_message
    continue_final_message: bool = False
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    chat_template: str | None = None  # as in a chat request
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


def render_messages(
    tokenizer: Any, req: ChatCompletionRequest | TokenizeRequest, trust_request_chat_template: bool
) -> str:
    """A chat or /tokenize request's messages as prompt text: the same rendering for both, so
    /tokenize counts what the chat endpoint would send. Raises APIError naming the field."""
    assert req.messages is not None
    try:
        return render_chat(
            tokenizer,
            [m.template_dict() for m in req.messages],
            add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message,
            tools=[t.model_dump(exclude_none=True) for t in req.tools or ()],
            chat_template_kwargs=req.chat_template_kwargs,
            chat_template=request_chat_template(
                req.chat_template, tokenizer, trust_request_chat_template
            ),
        )
    except ChatTemplateError as e:
        raise APIError(str(e), param=e.field) from None


class DetokenizeRequest(StrictModel):
    model: str | None = None
    tokens: list[Int64]


class OpenAIServingTokenization:
    def __init__(
        self,
        tokenizer: Any,
        model_names: Sequence[str],
        max_model_len: int,
        vocab_size: int,
        trust_request_chat_template: bool = False,
    ):
        self.tokenizer = tokenizer
        self.trust_request_chat_template = trust_request_chat_template
        self.model_names = model_names  # the served names; a request's `model` is one of them
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size

    def check(self, model: str | None) -> None:
        check_model(model, self.model_names)
        if self.tokenizer is None:
            raise APIError("this model has no tokenizer", param="model")

    def tokenize(self, req: TokenizeRequest) -> dict[str, Any]:
        self.check(req.model)
        if (req.prompt is None) == (req.messages is None):
            raise APIError("give exactly one of `prompt` and `messages`", param="prompt")
        if req.messages is not None:
            text = render_messages(self.tokenizer, req, self.trust_request_chat_template)
            special = bool(req.add_special_tokens)
        else:
            text, special = req.prompt or "", req.add_special_tokens is not False
        try:
            ids = self.tokenizer.encode(text, add_special_tokens=special)
        except Exception as e:  # noqa: BLE001 - text the tokenizer refuses
            raise APIError(f"the text cannot be tokenized ({type(e).__name__})") from None
        strs = self.tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
        return {
            "count": len(ids),
            "max_model_len": self.max_model_len,
            "tokens": ids,
            "token_strs": strs,
        }

    def detokenize(self, req: DetokenizeRequest) -> dict[str, Any]:
        self.check(req.model)
        bad = next((t for t in req.tokens if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise APIError(
                f"token id {bad} is outside the vocabulary; allowed: 0..{self.vocab_size - 1}",
                param="tokens",
            )
        try:
            return {"prompt": self.tokenizer.decode(req.tokens)}
        except Exception as e:  # noqa: BLE001 - an id past the tokenizer's own table
            raise APIError(
                f"the tokens cannot be decoded ({type(e).__name__})", param="tokens"
            ) from None

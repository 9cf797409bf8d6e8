"""A conversation -> prompt text through the tokenizer's chat template; shared by `LLM.chat`,
/v1/chat/completions and /tokenize so all three render the same text.

Tools (OpenAI function definitions) and extra template variables (`chat_template_kwargs`, e.g.
Qwen3's enable_thinking) are handed to the template, as vLLM does. It must not tokenize, nor
know about HTTP: a user's mistake is a ChatTemplateError (a ValueError naming the field).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# apply_chat_template's own parameters: template variables must not override how it renders
RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "conversation",
        "messages",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


class ChatTemplateError(ValueError):
    """A conversation the template cannot render; `field` names the input at fault."""

    def __init__(self, message: str, field: str = "messages") -> None:
        super().__init__(message)
        self.field = field


def load_chat_template(value: str) -> str:
    """--chat-template / LLM.chat's chat_template: a file's contents, or the template itself (as
    vLLM)."""
    path = Path(value).expanduser()
    if path.is_file():
        return path.read_text()
    if any(c in value for c in "{%"):
        return value
    raise ValueError(f"chat_template={value!r} is neither a file nor a Jinja template")


def request_chat_template(template: str | None, tokenizer: Any, trusted: bool) -> str | None:
    """A request's own `chat_template` (its text, never a file), as vLLM: refused unless the
    server trusts request templates (--trust-request-chat-template) or it is the server's own."""
    if template is None or trusted or template == getattr(tokenizer, "chat_template", None):
        return template
    raise ChatTemplateError(
        "a request's chat_template needs the server started with --trust-request-chat-template; "
        "leave it out to use the server's template",
        "chat_template",
    )


def text_contents(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with OpenAI content-part lists ([{"type": "text", "text": ...}, ...]) joined
    into one string, as /v1/chat/completions reads them; other parts are a ChatTemplateError."""
    out = []
    for i, msg in enumerate(messages):
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                for p in content
            ):
                raise ChatTemplateError(
                    "content parts must be {'type': 'text', 'text': <string>}; this model "
                    "reads text only",
                    f"messages[{i}].content",
                )
            msg = {**msg, "content": "".join(p["text"] for p in content)}
        out.append(msg)
    return out


def render_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool | None = True,
    continue_final_message: bool = False,
    tools: list[dict[str, Any]] | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    chat_template: str | None = None,
) -> str:
    """The prompt text of one conversation. continue_final_message: the text ends inside the
    last message (the model continues it, e.g. a prefilled assistant reply) instead of closing
    it; not with add_generation_prompt (None: whichever continue_final_message leaves).
    chat_template: a Jinja template in place of the tokenizer's. Raises ChatTemplateError."""
    has_template = chat_template or getattr(tokenizer, "chat_template", None)
    if tokenizer is None or not has_template:
        raise ChatTemplateError("this model has no chat template; send a plain text prompt")
    if add_generation_prompt is None:
        add_generation_prompt = not continue_final_message
    if continue_final_message and add_generation_prompt:
        raise ChatTemplateError(
            "continue_final_message and add_generation_prompt may not both be true: continue "
            "the last message, or open a new assistant turn",
            "continue_final_message",
        )
    kwargs = dict(chat_template_kwargs or {})
    reserved = sorted(RESERVED_TEMPLATE_KWARGS.intersection(kwargs))
    if reserved:
        raise ChatTemplateError(
            f"chat_template_kwargs may not set {', '.join(reserved)}; allowed: template "
            "variables other than apply_chat_template's own parameters",
            "chat_template_kwargs",
        )
    try:
        text = tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            chat_template=chat_template,
            **kwargs,
        )
    except Exception as e:  # noqa: BLE001 - a template that rejects these messages
        from jinja2 import TemplateSyntaxError

        if chat_template and isinstance(e, TemplateSyntaxError):
            raise ChatTemplateError(
                f"chat_template is not a Jinja template: {e}", "chat_template"
            ) from None
        raise ChatTemplateError(f"the chat template rejected the messages: {e}") from None
    if not isinstance(text, str):  # a template variable changed what apply_chat_template returns
        raise ChatTemplateError(
            f"the chat template returned {type(text).__name__}, not text", "chat_template_kwargs"
        )
    return text

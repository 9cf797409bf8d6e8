"""Frontend input processing: validate and tokenize a prompt into EngineCoreRequests.

Everything a user can get wrong is caught here, before anything is queued, as a ValueError that
names the field, the value and what is allowed. n > 1 fans out into n child requests. What
SamplingParams cannot check alone is checked here: bad_words become token sequences (with the
tokenizer), a structured-output grammar must parse (so a bad schema never reaches the core).
A prompt dict may carry vLLM's cache_salt; it travels beside the prompt (prompt_cache_salt), not
in SamplingParams, and each engine request carries it to the prefix cache.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from vgraph.config import ModelConfig
from vgraph.engine.protocol import EngineCoreRequest
from vgraph.sampling_params import SamplingParams

PromptType = str | list[int] | dict[str, Any]  # dict: vLLM's {"prompt": ...} / TokensPrompt
PROMPT_KEYS = ("prompt", "prompt_token_ids")
PROMPT_DICT_KEYS = (*PROMPT_KEYS, "cache_salt")
# vLLM's OpenAI server rule (validate_cache_salt), kept offline too so one salt works on both
MAX_CACHE_SALT_LEN = 128
CACHE_SALT_FORBIDDEN = frozenset("@/\\\x00")


class InputProcessor:
    def __init__(
        self, model_config: ModelConfig, tokenizer: Any | None, eos_token_ids: list[int]
    ) -> None:
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids

    def process_prompt(
        self,
        prompt: PromptType,
        add_special_tokens: bool = True,
        truncate_prompt_tokens: int | None = None,
    ) -> tuple[str | None, list[int]]:
        """Validate a prompt (text, token ids, or vLLM's {"prompt": text} / {"prompt_token_ids":
        ids} dict) and tokenize text: (text or None, token ids). add_special_tokens: whether
        the tokenizer adds its own (BOS) to text; a chat template writes them itself.
        truncate_prompt_tokens (vLLM's): keep the last k tokens (-1: max_model_len); a prompt
        cut short has no text.

        Raises ValueError for a user's mistake; nothing is queued anywhere."""
        mc = self.model_config
        if isinstance(prompt, dict):
            inner = unwrap_prompt_dict(prompt)
            text, ids = self.process_prompt(inner, add_special_tokens, truncate_prompt_tokens)
            if isinstance(inner, list) and len(ids) == len(inner):
                text = prompt.get("prompt")  # the text given beside whole token ids
            return text, ids
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("prompt='' is empty; give at least one character or token")
            if self.tokenizer is None:
                raise ValueError(
                    "prompt is text but this model has no tokenizer; pass token ids instead"
                )
            try:
                ids = self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
            except Exception as e:  # noqa: BLE001 - e.g. a lone surrogate the tokenizer refuses
                raise ValueError(
                    f"prompt={prompt[:40]!r} cannot be tokenized ({type(e).__name__}); "
                    "give valid Unicode text"
                ) from None
            if not ids:
                raise ValueError(
                    f"prompt={prompt[:40]!r} encodes to no tokens; give text that has some"
                )
            text: str | None = prompt
        elif isinstance(prompt, (list, tuple)):
            if not prompt:
                raise ValueError("prompt=[] is empty; give at least one token id")
            odd = next((t for t in prompt if not isinstance(t, int) or isinstance(t, bool)), None)
            if odd is not None:
                raise ValueError(
                    f"prompt token id {odd!r} is not allowed; token ids must be ints in "
                    f"0..{mc.vocab_size - 1}"
                )
            ids, text = list(prompt), None
        else:
            raise ValueError(
                f"prompt of type {type(prompt).__name__} is not allowed; "
                'use a str or a list of ints, or {"prompt": str} or {"prompt_token_ids": [ints]}'
            )
        if truncate_prompt_tokens is not None:
            keep = mc.max_model_len if truncate_prompt_tokens == -1 else truncate_prompt_tokens
            if not 1 <= keep <= mc.max_model_len:
                raise ValueError(
                    f"truncate_prompt_tokens={truncate_prompt_tokens} is not allowed; use -1 "
                    f"(max_model_len) or 1..max_model_len={mc.max_model_len}"
                )
            if len(ids) > keep:
                ids, text = ids[-keep:], None
        bad = next((t for t in ids if not 0 <= t < mc.vocab_size), None)
        if bad is not None:
            raise ValueError(
                f"prompt token id {bad} is outside the vocabulary; allowed: 0..{mc.vocab_size - 1}"
            )
        if len(ids) > mc.max_model_len:
            raise ValueError(
                f"prompt has {len(ids)} tokens; allowed: at most max_model_len="
                f"{mc.max_model_len} tokens. Shorten it or raise max_model_len"
            )
        return text, ids

    def make_requests(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        group_id: str | None = None,
        cache_salt: str | None = None,
    ) -> list[EngineCoreRequest]:
        """The n engine requests of one prompt; group_id (default: request_id) names the user
        request they belong to, so the scheduler can share its slots fairly between users;
        cache_salt: only requests with the same salt share prefix-cache blocks."""
        check_cache_salt(cache_salt)
        if not isinstance(params, SamplingParams):
            raise ValueError(
                f"sampling params of type {type(params).__name__} are not SamplingParams"
            )
        if params.bad_words:
            ids = self.bad_words_token_ids(params.bad_words)
            params = msgspec.structs.replace(params, bad_words_token_ids=ids)
        params.check_vocab(self.model_config.vocab_size)
        cap = self.model_config.max_logprobs
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(params, name)
            if value is not None and value > cap:
                raise ValueError(
                    f"SamplingParams.{name}={value} is not allowed; this engine returns "
                    f"at most {cap} (--max-logprobs)"
                )
        if params.structured_outputs is not None:
            from vgraph.structured_output.grammar import check_grammar

            check_grammar(params.structured_outputs)
        now = time.monotonic()
        children = [params] if params.n == 1 else [params.child(i) for i in range(params.n)]
        return [
            EngineCoreRequest(
                request_id=child_request_id(request_id, i, params.n),
                prompt_token_ids=prompt_ids,
                sampling_params=p,
                eos_token_ids=self.eos_token_ids,
                arrival_time=now,
                group_id=request_id if group_id is None else group_id,
                cache_salt=cache_salt,
            )
            for i, p in enumerate(children)
        ]

    def bad_words_token_ids(self, words: list[str]) -> list[list[int]]:
        """Each bad word as token ids, alone and after a space (as vLLM): a word in running text
        is usually tokenized with its leading space."""
        if self.tokenizer is None:
            raise ValueError("bad_words need a tokenizer; this model has none")
        out: list[list[int]] = []
        for word in words:
            for text in (word.lstrip(), " " + word.lstrip()):
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                if ids and ids not in out:
                    out.append(ids)
        return out


def child_request_id(parent_id: str, index: int, n: int) -> str:
    return parent_id if n == 1 else f"{index}_{parent_id}"


def check_cache_salt(cache_salt: object) -> None:
    """vLLM's rule: None, or a non-empty string of at most 128 characters without '@', '/',
    '\\' or NUL. Raises ValueError naming the field."""
    if cache_salt is None:
        return
    if not isinstance(cache_salt, str) or not cache_salt:
        got = repr(cache_salt) if isinstance(cache_salt, str) else type(cache_salt).__name__
        raise ValueError(
            f"Parameter 'cache_salt' must be a non-empty string if provided (got {got})"
        )
    if len(cache_salt) > MAX_CACHE_SALT_LEN or not CACHE_SALT_FORBIDDEN.isdisjoint(cache_salt):
        shown = repr(cache_salt[:40]) + ("..." if len(cache_salt) > 40 else "")
        raise ValueError(
            f"Parameter 'cache_salt' must be at most {MAX_CACHE_SALT_LEN} characters and must "
            f"not contain '@', '/', '\\', or NUL (got {shown}, {len(cache_salt)} characters)"
        )


def prompt_cache_salt(prompt: PromptType) -> str | None:
    """The cache_salt of a prompt dict (vLLM's {"prompt": ..., "cache_salt": ...}), else None."""
    if not isinstance(prompt, dict):
        return None
    salt = prompt.get("cache_salt")
    check_cache_salt(salt)
    return salt


def unwrap_prompt_dict(prompt: dict[str, Any]) -> str | list[int]:
    """The text or token ids of a prompt dict: prompt_token_ids when present (a "prompt" beside
    them is only the text reported back), else prompt. Its cache_salt: prompt_cache_salt()."""
    unknown = sorted(str(k) for k in prompt if k not in PROMPT_DICT_KEYS)
    if unknown or not any(k in prompt for k in PROMPT_KEYS):
        raise ValueError(
            f"prompt dict with keys {sorted(map(str, prompt))} is not allowed; give "
            '"prompt" (text) or "prompt_token_ids" (a list of ints), and no other key but '
            '"cache_salt"'
        )
    if "prompt_token_ids" in prompt:
        ids = prompt["prompt_token_ids"]
        if "prompt" in prompt and not isinstance(prompt["prompt"], str):
            raise ValueError('prompt dict: "prompt" beside "prompt_token_ids" must be a str')
        if not isinstance(ids, (list, tuple)):
            raise ValueError(
                f'prompt dict: "prompt_token_ids" of type {type(ids).__name__} is not allowed; '
                "use a list of ints"
            )
        return list(ids)
    if not isinstance(prompt["prompt"], str):
        raise ValueError(
            f'prompt dict: "prompt" of type {type(prompt["prompt"]).__name__} is not allowed; '
            "use a str"
        )
    return prompt["prompt"]

"""Incremental detokenization and stop strings, per request, in the frontend.

Text grows one token at a time through the tokenizers library's DecodeStream (which buffers
partial UTF-8 sequences), seeded with the prompt's tail so that the first output token decodes in
context. Stop strings are searched only where new text could complete one; while a stream is
running, the last len(longest stop) - 1 characters are held back so a stop string is never sent
and then taken back. As in vLLM, no stop string is matched inside the text of the first min_tokens
tokens, and a request ended by an EOS or stop token id leaves that token's text out.
"""

from __future__ import annotations

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from vgraph.sampling_params import SamplingParams

_PROMPT_CONTEXT = 6  # prompt tokens fed first, so the first output token decodes in context


class IncrementalDetokenizer:
    def __init__(
        self, tokenizer: Tokenizer, prompt_token_ids: list[int], params: SamplingParams
    ) -> None:
        self.tokenizer = tokenizer
        self.stream = DecodeStream(skip_special_tokens=params.skip_special_tokens)
        context = prompt_token_ids[-_PROMPT_CONTEXT:]
        if context:
            self.stream.step(tokenizer, context)
        self.stop = params.stop or []
        self.include_stop = params.include_stop_str_in_output
        self.holdback = max((len(s) for s in self.stop), default=1) - 1
        self.min_tokens = params.min_tokens
        self.num_tokens = 0  # output tokens seen so far
        self.output_text = ""
        self._sent = 0  # characters of output_text already returned as deltas

    def update(self, new_token_ids: list[int]) -> str | None:
        """Append tokens; returns the stop string if one now ends the text (text truncated)."""
        for token_id in new_token_ids:
            self.num_tokens += 1
            chunk = self.stream.step(self.tokenizer, token_id)
            if not chunk:
                continue
            start = len(self.output_text)
            self.output_text += chunk
            if self.num_tokens <= self.min_tokens:
                continue  # text of the first min_tokens tokens cannot stop the request
            stop = self._find_stop(start)
            if stop is not None:
                return stop
        return None

    def _find_stop(self, new_from: int) -> str | None:
        for s in self.stop:
            idx = self.output_text.find(s, max(new_from - len(s) + 1, 0))
            if idx != -1:
                end = idx + len(s) if self.include_stop else idx
                self.output_text = self.output_text[:end]
                return s
        return None

    def delta(self, finished: bool) -> str:
        """New text since the last call; holds back a possible stop-string prefix until done."""
        end = len(self.output_text) if finished else max(len(self.output_text) - self.holdback, 0)
        if end <= self._sent:
            return ""
        text = self.output_text[self._sent : end]
        self._sent = end
        return text

"""The offline batch API: `LLM(...).generate(prompts, params)` and `LLM.chat(messages)`."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tqdm import tqdm

from vgraph.engine.arg_utils import create_engine_config
from vgraph.engine.input_processor import PromptType, prompt_cache_salt
from vgraph.engine.llm_engine import LLMEngine
from vgraph.entrypoints.chat_utils import load_chat_template, render_chat, text_contents
from vgraph.entrypoints.generation_config import load_sampling_defaults
from vgraph.outputs import RequestOutput
from vgraph.sampling_params import SamplingParams

Message = dict[str, Any]


class LLM:
    """An engine for offline generation. `LLM()` loads the built-in default model.

    Keyword arguments are the fields of EngineArgs (vgraph/engine/engine_args.py: dtype,
    max_model_len, load_format, attention_backend, compilation_config, optimization_level,
    enable_prefix_caching, enable_cascade_attention, ...),
    the same arguments `vgraph serve` takes as flags; an unknown one is a ValueError. The engine
    core runs in its own process unless multiprocess=False (or VGRAPH_ENABLE_MULTIPROCESSING=0).
    generation_config (an EngineArgs field): where generate() without sampling_params takes its
    defaults ("auto": the model's generation_config.json, "vllm": SamplingParams(), or a
    folder), as vLLM.
    """

    def __init__(
        self,
        model: str | None = None,
        multiprocess: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = create_engine_config(model, **kwargs)
        mc = self.config.model_config
        self.default_sampling = load_sampling_defaults(mc.model, mc.generation_config)
        self.engine = LLMEngine(self.config, multiprocess=multiprocess)
        self._ids = itertools.count()

    def get_default_sampling_params(self) -> SamplingParams:
        """SamplingParams() with the model's generation-config defaults (see generation_config)."""
        return SamplingParams(**self.default_sampling)

    def shutdown(self) -> None:
        """Stop the engine core (its process, if any). Also done at exit."""
        self.engine.shutdown()

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Generate for every prompt (text, token ids, or vLLM's {"prompt": ...} /
        {"prompt_token_ids": [...]} dicts, which may carry a "cache_salt": only prompts with
        the same salt share prefix-cache blocks); outputs come back in prompt order. Without
        sampling_params: get_default_sampling_params()."""
        if isinstance(prompts, (str, dict)) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        if not isinstance(prompts, Iterable):
            raise ValueError(
                f"prompts must be text, token ids, a {{'prompt': ...}} / {{'prompt_token_ids': "
                f"...}} dict, or a list of them; got {type(prompts).__name__}"
            )
        prompts = list(prompts)
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(prompts)
        elif not isinstance(sampling_params, Iterable) or isinstance(
            sampling_params, (str, Mapping)
        ):
            raise ValueError(
                f"sampling_params must be a SamplingParams or a list of them, one per prompt; got "
                f"{type(sampling_params).__name__} (a dict of fields: SamplingParams(**fields))"
            )
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise ValueError(
                    f"sampling_params has {len(params)} entries for {len(prompts)} prompts; "
                    f"give one SamplingParams or one per prompt"
                )
        # a bad prompt or params entry queues nothing: the prompts and types are checked first,
        # and an entry the processor refuses (token ids outside the vocabulary, a grammar that
        # does not parse, ...) takes back the requests queued before it
        bad = next((p for p in params if not isinstance(p, SamplingParams)), None)
        if bad is not None:
            raise ValueError(
                f"sampling_params entry of type {type(bad).__name__} is not a SamplingParams"
            )
        tokenized = [self.engine.processor.process_prompt(p) for p in prompts]
        salts = [prompt_cache_salt(p) for p in prompts]
        ids: list[str] = []
        try:
            for (text, prompt_ids), p, salt in zip(tokenized, params, salts):
                ids.append(str(next(self._ids)))
                self.engine.add_tokenized(ids[-1], text, prompt_ids, p, cache_salt=salt)
        except BaseException:
            self.engine.abort_request(ids)
            raise
        return self._run(ids, use_tqdm)

    def chat(
        self,
        messages: list[Message] | list[list[Message]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: list[dict[str, Any]] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        chat_template: str | None = None,
    ) -> list[RequestOutput]:
        """Generate replies to one conversation or a list of them, via the chat template.
        Message contents may be strings or OpenAI text-part lists (joined, as the server does).
        continue_final_message (with add_generation_prompt=False): continue the last message
        (a prefilled assistant reply) instead of opening a new turn. tools (OpenAI function
        definitions) and chat_template_kwargs (template variables, e.g. enable_thinking) go to
        the template, as in /v1/chat/completions; chat_template (a Jinja template or a file of
        one) replaces the tokenizer's. The template writes the special tokens (BOS): the
        tokenizer adds none of its own, as in transformers' apply_chat_template."""
        if self.tokenizer is None:
            raise ValueError("chat() needs a tokenizer; this model folder has none")
        template = None if chat_template is None else load_chat_template(chat_template)
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts: list[PromptType] = []
        for conv in conversations:
            text = render_chat(
                self.tokenizer,
                text_contents(conv),
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                tools=tools,
                chat_template_kwargs=chat_template_kwargs,
                chat_template=template,
            )
            _, ids = self.engine.processor.process_prompt(text, add_special_tokens=False)
            prompts.append({"prompt": text, "prompt_token_ids": ids})
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    def _run(self, request_ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        """Step until every request finished; the bar shows input and output tokens per second
        of the finished requests, as vLLM's."""
        done: dict[str, RequestOutput] = {}
        bar = tqdm(total=len(request_ids), desc="Processed prompts", disable=not use_tqdm)
        num_in = num_out = 0
        try:
            while self.engine.has_unfinished_requests():
                for out in self.engine.step():
                    if out.finished:
                        done[out.request_id] = out
                        num_in += len(out.prompt_token_ids or ())
                        num_out += sum(len(c.token_ids) for c in out.outputs)
                        elapsed = bar.format_dict["elapsed"] or 1e-9
                        bar.set_postfix_str(
                            f"est. speed input: {num_in / elapsed:.2f} toks/s, "
                            f"output: {num_out / elapsed:.2f} toks/s",
                            refresh=False,
                        )
                        bar.update(1)
        except BaseException:
            self.engine.abort_request(list(self.engine.output_processor.parents))
            raise
        finally:
            bar.close()
        return [done[rid] for rid in request_ids]

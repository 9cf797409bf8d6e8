"""What the two frontends share: LLMEngine (offline, sync) and AsyncLLM (server, asyncio).

Set-up: the tokenizer, the InputProcessor (validate and tokenize) and the OutputProcessor
(detokenize, stop strings). Submit: one validated prompt becomes n engine requests (their ids the
user's id and a serial, new to the core at each submit), registered with the output processor,
then sent to the core client. Abort: forget a user request in the frontend and abort its engine
requests in the core. How outputs are read (a blocking step() or an asyncio output handler) stays
in the subclass; so does the choice of core client.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from vgraph.engine.input_processor import InputProcessor
from vgraph.engine.output_processor import OutputKind, OutputProcessor
from vgraph.sampling_params import SamplingParams
from vgraph.tokenizer import eos_token_ids, load_tokenizer

if TYPE_CHECKING:
    from vgraph.config import VGraphConfig
    from vgraph.engine.client import EngineCoreClient, MPClientBase
    from vgraph.engine.protocol import EngineCoreRequest


class FrontendBase:
    """Tokenizer and processors; submit() and abort_parent() over the subclass's core client."""

    client: EngineCoreClient | MPClientBase  # set by the subclass, after the tokenizer loads

    def __init__(self, config: VGraphConfig) -> None:
        self.config = config
        self.tokenizer = load_tokenizer(config.model_config)
        eos = eos_token_ids(config.model_config, self.tokenizer)
        self.processor = InputProcessor(config.model_config, self.tokenizer, eos)
        self.output_processor = OutputProcessor(self.tokenizer)
        self._submits = itertools.count()  # makes each submit's engine request ids new

    def submit(
        self,
        request_id: str,
        text: str | None,
        ids: list[int],
        params: SamplingParams,
        kind: OutputKind,
        group_id: str | None = None,
        cache_salt: str | None = None,
    ) -> list[EngineCoreRequest]:
        """Queue a prompt already validated by processor.process_prompt(); returns the n engine
        requests sent. group_id: the user request the prompt belongs to (fair scheduling;
        default request_id); cache_salt: vLLM's prefix-cache salt. Raises ValueError,
        registering nothing, on a request id in use, a bad cache_salt, or on params that are
        not SamplingParams or carry token ids outside the vocabulary."""
        if request_id in self.output_processor.parents:
            raise ValueError(f"request_id={request_id!r} is already in use")
        # The engine requests' ids are new to the core even when the user's id is reused: an
        # aborted request's last outputs may still be on their way and must find no one.
        engine_id = f"{request_id}-{next(self._submits)}"
        requests = self.processor.make_requests(
            engine_id, ids, params, group_id or request_id, cache_salt
        )
        self.output_processor.add_request(
            request_id,
            text,
            ids,
            [r.request_id for r in requests],
            [r.sampling_params for r in requests],
            kind,
        )
        for r in requests:
            self.client.add_request(r)
        return requests

    def abort_parent(self, request_id: str) -> None:
        """Finish a user request in the frontend and abort its engine requests in the core."""
        children = self.output_processor.child_ids(request_id)
        self.output_processor.abort(request_id)
        self.client.abort_requests(children)

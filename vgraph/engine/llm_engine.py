"""LLMEngine: the synchronous frontend (offline API): processor -> core client -> outputs.

Set-up, submit and abort are FrontendBase's (shared with AsyncLLM); this class adds the blocking
step(): read one step's outputs from the core, turn them into RequestOutputs.
"""

from __future__ import annotations

from vgraph.config import VGraphConfig
from vgraph.engine.client import EngineCoreClient, make_client
from vgraph.engine.frontend import FrontendBase
from vgraph.engine.input_processor import PromptType, prompt_cache_salt
from vgraph.engine.output_processor import OutputKind
from vgraph.outputs import RequestOutput
from vgraph.sampling_params import SamplingParams


class LLMEngine(FrontendBase):
    def __init__(
        self,
        config: VGraphConfig,
        client: EngineCoreClient | None = None,
        multiprocess: bool | None = None,
    ) -> None:
        """multiprocess: engine core in its own process (default, see make_client) or here."""
        super().__init__(config)
        self.client: EngineCoreClient = client or make_client(config, multiprocess)

    def add_request(
        self,
        request_id: str,
        prompt: PromptType,
        params: SamplingParams,
        kind: OutputKind = OutputKind.FINAL_ONLY,
    ) -> None:
        """Validate, then queue; raises ValueError and queues nothing on bad input."""
        text, ids = self.processor.process_prompt(prompt)
        self.add_tokenized(request_id, text, ids, params, kind, prompt_cache_salt(prompt))

    def add_tokenized(
        self,
        request_id: str,
        text: str | None,
        ids: list[int],
        params: SamplingParams,
        kind: OutputKind = OutputKind.FINAL_ONLY,
        cache_salt: str | None = None,
    ) -> None:
        """Queue a prompt already validated by processor.process_prompt(); cache_salt: only
        requests with the same salt share prefix-cache blocks."""
        self.submit(request_id, text, ids, params, kind, cache_salt=cache_salt)

    def abort_request(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.abort_parent(rid)

    def has_unfinished_requests(self) -> bool:
        return self.output_processor.has_unfinished()

    def step(self) -> list[RequestOutput]:
        outputs = self.client.get_output()
        results, to_abort = self.output_processor.process_outputs(outputs.outputs)
        if to_abort:
            self.client.abort_requests(to_abort)
        self.last_stats = outputs.scheduler_stats
        return results

    def shutdown(self) -> None:
        self.client.shutdown()

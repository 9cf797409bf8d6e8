"""LLMEngine: the synchronous frontend (offline API): processor -> core client -> outputs."""

from __future__ import annotations

from vgraph.config import VGraphConfig
from vgraph.engine.client import EngineCoreClient, make_client
from vgraph.engine.input_processor import InputProcessor, PromptType
from vgraph.engine.output_processor import OutputKind, OutputProcessor
from vgraph.outputs import RequestOutput
from vgraph.sampling_params import SamplingParams
from vgraph.tokenizer import eos_token_ids, load_tokenizer


class LLMEngine:
    def __init__(
        self,
        config: VGraphConfig,
        client: EngineCoreClient | None = None,
        multiprocess: bool | None = None,
    ) -> None:
        """multiprocess: engine core in its own process (default, see make_client) or here."""
        self.config = config
        self.tokenizer = load_tokenizer(config.model_config)
        eos = eos_token_ids(config.model_config, self.tokenizer)
        self.processor = InputProcessor(config.model_config, self.tokenizer, eos)
        self.output_processor = OutputProcessor(self.tokenizer)
        self.client = client or make_client(config, multiprocess)

    def add_request(
        self,
        request_id: str,
        prompt: PromptType,
        params: SamplingParams,
        kind: OutputKind = OutputKind.FINAL_ONLY,
    ) -> None:
        """Validate, then queue; raises ValueError and queues nothing on bad input."""
        text, ids = self.processor.tokenize(prompt)
        self.add_tokenized(request_id, text, ids, params, kind)

    def add_tokenized(
        self,
        request_id: str,
        text: str | None,
        ids: list[int],
        params: SamplingParams,
        kind: OutputKind = OutputKind.FINAL_ONLY,
    ) -> None:
        """Queue a prompt already validated by processor.tokenize()."""
        if request_id in self.output_processor.parents:
            raise ValueError(f"request_id={request_id!r} is already in use")
        requests = self.processor.make_requests(request_id, ids, params)
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

    def abort_request(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            children = self.output_processor.child_ids(rid)
            self.output_processor.abort(rid)
            self.client.abort_requests(children)

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

"""AsyncLLM: the asyncio frontend behind `vgraph serve`.

1. generate(): validate and tokenize, fan out n samples, send EngineCoreRequests, then yield
   delta RequestOutputs from the request's own OutputCollector until it finishes.
2. One output-handler task reads EngineCoreOutputs from the core client, runs the output
   processor (detokenize, stop strings) one engine output at a time, so a failure there ends only
   its request, and routes each RequestOutput to its request's collector. A collector holds one
   output: the next is merged into it if the consumer has not taken it yet, so a consumer that
   falls behind (many streams over fast steps) takes several tokens at once, never a backlog.
3. A generator that is closed early (client disconnect, cancellation, an error) aborts its
   request in the core, which frees its KV blocks.
4. Engine death (EngineDeadError from the client) is put into every collector; later calls raise
   it.
Per step it also builds IterationStats (tokens, TTFT, inter-token and end-to-end latencies) and
hands them with the core's SchedulerStats to the stat loggers (the server's Prometheus metrics).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

from vgraph.config import VGraphConfig
from vgraph.engine.async_client import AsyncMPClient
from vgraph.engine.client import EngineDeadError
from vgraph.engine.frontend import FrontendBase
from vgraph.engine.input_processor import PromptType, prompt_cache_salt
from vgraph.engine.output_processor import OutputKind
from vgraph.engine.protocol import SchedulerStats
from vgraph.outputs import RequestOutput
from vgraph.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


@dataclass
class IterationStats:
    """What the frontend saw in one batch of engine outputs."""

    num_prompt_tokens: int = 0  # of requests that got their first token in this batch
    num_generation_tokens: int = 0
    ttfts: list[float] = field(default_factory=list)  # seconds
    itls: list[float] = field(default_factory=list)
    e2e_latencies: list[float] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)  # one per finished request
    # per finished request, as vLLM's histograms: seconds waiting, prefilling (first step to
    # first token), decoding (first to last token), in the engine (first step to last token)
    queue_times: list[float] = field(default_factory=list)
    prefill_times: list[float] = field(default_factory=list)
    decode_times: list[float] = field(default_factory=list)
    inference_times: list[float] = field(default_factory=list)
    prompt_lens: list[int] = field(default_factory=list)
    generation_lens: list[int] = field(default_factory=list)


class OutputCollector:
    """One request's delta outputs on their way from the output handler to its consumer.

    put() never waits: an output that finds the previous one still there is merged into it
    (RequestOutput.merge_delta), and an exception takes the place of whatever waits. get() waits
    for something and takes it.
    """

    def __init__(self) -> None:
        self.pending: RequestOutput | BaseException | None = None
        self.ready = asyncio.Event()

    def put(self, item: RequestOutput | BaseException) -> None:
        if isinstance(self.pending, RequestOutput) and isinstance(item, RequestOutput):
            self.pending.merge_delta(item)
        elif not isinstance(self.pending, BaseException):
            self.pending = item
        self.ready.set()

    async def get(self) -> RequestOutput | BaseException:
        await self.ready.wait()
        item, self.pending = self.pending, None
        self.ready.clear()
        assert item is not None
        return item


class StatLogger(Protocol):
    def record(self, scheduler_stats: SchedulerStats | None, iteration: IterationStats) -> None: ...


@dataclass
class RequestTimes:
    arrival: float
    num_prompt_tokens: int  # the prompt's tokens times n: what the engine takes in
    prompt_len: int  # the request's prompt length (its histogram's observation)
    first_token: float | None = None
    last_token: float = 0.0
    scheduled: float | None = None  # the core's first step of any of its samples
    num_generation_tokens: int = 0


class AsyncLLM(FrontendBase):
    """Set-up, submit and abort are FrontendBase's (shared with LLMEngine); this class adds the
    per-request output collectors and the output handler task."""

    def __init__(self, config: VGraphConfig, client: AsyncMPClient | None = None) -> None:
        super().__init__(config)
        self.client: AsyncMPClient = client or AsyncMPClient(config)
        self.collectors: dict[str, OutputCollector] = {}
        self.times: dict[str, RequestTimes] = {}
        self.output_handler: asyncio.Task[None] | None = None
        self.dead_error: EngineDeadError | None = None
        self._dead = asyncio.Event()
        self.scheduler_stats: SchedulerStats | None = None
        self.stat_loggers: list[StatLogger] = []
        self.log_requests = False  # --enable-log-requests: one INFO line per request

    @property
    def is_dead(self) -> bool:
        return self.dead_error is not None

    async def wait_dead(self) -> EngineDeadError:
        """Returns once the engine core has died."""
        await self._dead.wait()
        assert self.dead_error is not None
        return self.dead_error

    async def generate(
        self, prompt: PromptType, params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        text, ids = self.processor.process_prompt(prompt)
        salt = prompt_cache_salt(prompt)
        # closed with this generator, so that a consumer's aclose() aborts the request at once
        outs = self.generate_tokenized(text, ids, params, request_id, cache_salt=salt)
        async with aclosing(outs):
            async for out in outs:
                yield out

    async def generate_tokenized(
        self,
        text: str | None,
        ids: list[int],
        params: SamplingParams,
        request_id: str,
        group_id: str | None = None,
        cache_salt: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Delta RequestOutputs of one validated prompt; the last one has finished=True.
        group_id: the user request this prompt belongs to (for fair scheduling); cache_salt:
        only requests with the same salt share prefix-cache blocks."""
        if self.dead_error is not None:
            raise self.dead_error
        # the collector outlives the request in the output processor until the caller has the end
        if request_id in self.collectors:
            raise ValueError(f"request_id={request_id!r} is already in use")
        self.start_output_handler()
        if self.log_requests:
            logger.info("request %s: %d prompt tokens, params %s", request_id, len(ids), params)
        collector = self.collectors[request_id] = OutputCollector()
        finished = False
        try:
            requests = self.submit(
                request_id, text, ids, params, OutputKind.DELTA, group_id, cache_salt
            )
            num_prompt_tokens = len(ids) * len(requests)
            self.times[request_id] = RequestTimes(
                requests[0].arrival_time, num_prompt_tokens, len(ids)
            )
            while not finished:
                item = await collector.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
        finally:
            self.collectors.pop(request_id, None)
            self.times.pop(request_id, None)
            if not finished:  # cancelled, disconnected or failed: free its blocks in the core
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        try:
            self.abort_parent(request_id)
        except EngineDeadError:
            pass

    async def call_utility(self, method: str, *args: Any) -> Any:
        return await self.client.call_utility_async(method, *args)

    # ---- the output handler -------------------------------------------------------------------
    def start_output_handler(self) -> None:
        if self.output_handler is None:
            self.output_handler = asyncio.get_running_loop().create_task(self._handle_outputs())

    async def _handle_outputs(self) -> None:
        try:
            while True:
                outputs = await self.client.get_output_async()
                if outputs.scheduler_stats is not None:
                    self.scheduler_stats = outputs.scheduler_stats
                iteration = IterationStats()
                now = time.monotonic()
                for out in outputs.outputs:
                    if out.scheduled_time is not None:
                        self._note_scheduled(out.request_id, out.scheduled_time)
                    try:
                        results, to_abort = self.output_processor.process_outputs([out])
                    except Exception as e:  # e.g. a detokenizer failure
                        logger.exception("output processing failed for %s", out.request_id)
                        self._fail_request(out.request_id, e)
                        continue
                    self.client.abort_requests(to_abort)
                    for ro in results:
                        self._record(ro, iteration, now)
                        collector = self.collectors.get(ro.request_id)
                        if collector is not None:
                            collector.put(ro)
                for stat_logger in self.stat_loggers:
                    stat_logger.record(self.scheduler_stats, iteration)
        except EngineDeadError as e:
            self._fail_all(e)
        except Exception as e:  # without the handler no request can finish
            logger.exception("output handler failed")
            self._fail_all(EngineDeadError(f"output handler failed: {e}"))

    def _record(self, ro: RequestOutput, it: IterationStats, now: float) -> None:
        times = self.times.get(ro.request_id)
        if times is None:
            return
        num_new = sum(len(c.token_ids) for c in ro.outputs)
        if num_new:
            if times.first_token is None:
                times.first_token = now
                it.ttfts.append(now - times.arrival)
                it.num_prompt_tokens += times.num_prompt_tokens
            elif now != times.last_token:  # n > 1: the other samples of this step don't count
                it.itls.append(now - times.last_token)
            times.last_token = now
            times.num_generation_tokens += num_new
            it.num_generation_tokens += num_new
        if ro.finished:
            it.e2e_latencies.append(now - times.arrival)
            it.prompt_lens.append(times.prompt_len)
            it.generation_lens.append(times.num_generation_tokens)
            if times.scheduled is not None and times.first_token is not None:
                it.queue_times.append(max(times.scheduled - times.arrival, 0.0))
                it.prefill_times.append(max(times.first_token - times.scheduled, 0.0))
                it.decode_times.append(times.last_token - times.first_token)
                it.inference_times.append(max(times.last_token - times.scheduled, 0.0))
            last = ro.outputs[-1].finish_reason if ro.outputs else None
            it.finish_reasons.append(last or "abort")

    def _note_scheduled(self, engine_request_id: str, scheduled: float) -> None:
        parent = self.output_processor.child_to_parent.get(engine_request_id)
        times = self.times.get(parent.request_id) if parent is not None else None
        if times is not None and (times.scheduled is None or scheduled < times.scheduled):
            times.scheduled = scheduled

    def _fail_request(self, engine_request_id: str, error: Exception) -> None:
        parent = self.output_processor.child_to_parent.get(engine_request_id)
        if parent is None:
            return
        collector = self.collectors.get(parent.request_id)
        self.abort(parent.request_id)
        if collector is not None:
            collector.put(RuntimeError(f"output processing failed: {error}"))

    def _fail_all(self, error: EngineDeadError) -> None:
        logger.error("engine is dead: %s", error)
        self.dead_error = error
        self._dead.set()
        for collector in self.collectors.values():
            collector.put(error)

    def shutdown(self) -> None:
        if self.output_handler is not None:
            self.output_handler.cancel()
        self.client.shutdown()

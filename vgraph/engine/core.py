"""EngineCore: owns the scheduler and the model runner; step() = schedule -> execute -> update.

No I/O here: requests come in through add_request/abort_requests, outputs leave as the return
value of step(). core_proc.py wraps it in a process with sockets; the in-process client calls it
directly.

With async scheduling (SchedulerConfig.async_scheduling) the steps are pipelined two deep: step()
schedules, launches and commits step N + 1, then waits for step N's tokens and returns step N's
outputs, so the host's work overlaps the device's (docs/architecture.md, "Async scheduling").
While a request whose sampling needs its tokens on the host is unfinished
(Request.needs_host_tokens: bad words, structured outputs, prompt_logprobs), each step's forward
is launched before the previous step completes and its sampling after.

No single request's data may take the engine down:
  1. add_request re-checks everything the frontend checked (prompt ids, every token id in the
     sampling params, EOS ids) and refuses a bad request with a ValueError;
  2. a step that raises anyway is retried one request at a time: a request that fails alone is
     finished with finish_reason "error" and the others go on. Only when every request of a batch
     of two or more fails alone is the fault the engine's; then the step raises (engine death).
A request with structured outputs waits outside the scheduler until its grammar is compiled (on a
worker thread, structured_output/manager.py); the step's token bitmask goes to the runner.

With tensor_parallel_size > 1 the core is rank 0: it starts the worker ranks (TPWorkers) before
it joins the group and builds its runner, whose steps it broadcasts to them; a worker that dies
takes the engine down (on_worker_death, else the next step raises).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from vgraph.config import VGraphConfig
from vgraph.core.kv_cache_manager import KVCacheManager
from vgraph.core.scheduler import Scheduler, SchedulerOutput
from vgraph.engine.protocol import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    SchedulerStats,
)
from vgraph.request import Request, RequestStatus
from vgraph.structured_output.manager import StructuredOutputManager
from vgraph.worker.model_runner import ModelRunner
from vgraph.worker.runner_output import ModelRunnerOutput, PendingOutput
from vgraph.worker.step_sampler import BitmaskFn

if TYPE_CHECKING:
    from vgraph.distributed.tp_workers import TPWorkers

logger = logging.getLogger(__name__)
GRAPH_STATS_EVERY = 64  # steps between two GraphStats sent along with the outputs
GRAMMAR_WAIT_S = 0.01  # an idle step waits this long for a grammar compile before returning
WORKER_DEATH_WAIT_S = 5.0  # tp > 1: a failed step waits this long for the watchdog to name a rank


class EngineCore:
    def __init__(
        self, config: VGraphConfig, on_worker_death: Callable[[str], None] | None = None
    ) -> None:
        self.config = config
        t0 = time.perf_counter()
        self.workers: TPWorkers | None = None
        if config.parallel_config.tensor_parallel_size > 1:
            self.workers = start_tp_workers(config, on_worker_death)
        try:
            self.runner = ModelRunner(config)
            if self.workers is not None:
                self.runner.broadcast = self.workers.broadcast
            self.runner.load_model()
            num_blocks = self.runner.initialize_kv_cache()
            self.runner.capture_model()
            cc, mc = config.cache_config, config.model_config
            kv = KVCacheManager(
                num_blocks,
                cc.block_size,
                enable_caching=cc.enable_prefix_caching,
                extra_keys=(mc.model, str(mc.dtype)),  # what besides the tokens shapes the KV
            )
            self.scheduler = Scheduler(config.scheduler_config, kv)
        except BaseException:
            self.stop_workers()
            raise
        self.num_steps = 0
        self.async_scheduling = config.scheduler_config.async_scheduling
        # the launched step whose tokens are not back yet: (step, samples, its pending output)
        self.in_flight: tuple[SchedulerOutput, list[bool], PendingOutput] | None = None
        self.structured: StructuredOutputManager | None = None  # made on first use
        self.waiting_for_grammar: list[Request] = []
        logger.info("engine core ready in %.1f s", time.perf_counter() - t0)

    # ---- requests in ------------------------------------------------------------------------
    def add_request(self, request: EngineCoreRequest) -> None:
        """Admit a request; raises ValueError (and admits nothing) if it can't be served."""
        self.validate(request)
        req = Request(
            request.request_id,
            list(request.prompt_token_ids),
            request.sampling_params,
            frozenset(request.eos_token_ids),
            request.arrival_time,
            request.group_id,
            request.cache_salt,
        )
        if request.sampling_params.structured_outputs is None:
            self.scheduler.add_request(req)
            return
        if self.structured is None:
            self.structured = StructuredOutputManager(self.config.model_config)
        self.structured.submit(req)
        self.waiting_for_grammar.append(req)

    def validate(self, request: EngineCoreRequest) -> None:
        """The core's own guard: the frontend checks first, but the core never trusts a socket."""
        mc = self.config.model_config
        ids = request.prompt_token_ids
        if not ids:
            raise ValueError("prompt is empty; give at least one token")
        if len(ids) > mc.max_model_len:
            raise ValueError(
                f"prompt has {len(ids)} tokens, more than max_model_len={mc.max_model_len}"
            )
        bad = next((t for t in ids if not 0 <= t < mc.vocab_size), None)
        if bad is not None:
            raise ValueError(
                f"prompt token id {bad} is outside the vocabulary [0, {mc.vocab_size})"
            )
        bad = next((t for t in request.eos_token_ids if not 0 <= t < mc.vocab_size), None)
        if bad is not None:
            raise ValueError(f"EOS token id {bad} is outside the vocabulary [0, {mc.vocab_size})")
        request.sampling_params.check_vocab(mc.vocab_size)
        if (
            request.sampling_params.prompt_logprobs is not None
            and self.config.parallel_config.tensor_parallel_size > 1
        ):  # its extra LM-head call on rank 0 would have no partner on the worker ranks
            raise ValueError(
                "prompt_logprobs is not supported with tensor_parallel_size > 1; leave it out"
            )

    def abort_requests(self, request_ids: list[str]) -> None:
        self.scheduler.abort_requests(request_ids)
        if self.structured is not None:
            ids = set(request_ids)
            self.waiting_for_grammar = [
                r for r in self.waiting_for_grammar if r.request_id not in ids
            ]
            for rid in ids:
                self.structured.forget(rid)

    def has_unfinished_requests(self) -> bool:
        return (
            self.scheduler.has_unfinished_requests()
            or bool(self.waiting_for_grammar)
            or self.in_flight is not None
        )

    def admit_compiled(self) -> list[EngineCoreOutput]:
        """Move requests whose grammar is ready into the scheduler; errors for those that failed.
        With nothing else to run, wait a little for a compile rather than spin."""
        if not self.waiting_for_grammar or self.structured is None:
            return []
        if not self.scheduler.has_unfinished_requests():
            self.structured.wait_any(GRAMMAR_WAIT_S)
        still, errors = [], []
        for req in self.waiting_for_grammar:
            ready = self.structured.poll(req)
            if ready is True:
                self.scheduler.add_request(req)
            elif ready is False:
                still.append(req)
            else:
                errors.append(
                    EngineCoreOutput(req.request_id, [], finish_reason="error", error=ready)
                )
        self.waiting_for_grammar = still
        return errors

    # ---- one step ---------------------------------------------------------------------------
    def step(self) -> EngineCoreOutputs:
        """One step: schedule, execute, update. With async scheduling the step scheduled here is
        launched before the previous one's tokens are back, and the outputs returned are the
        previous step's: the host schedules, prepares and launches while the device still
        computes."""
        if self.workers is not None:
            self.workers.check_alive()
        outputs = self.admit_compiled()
        sched = self.scheduler.schedule()
        if not self.async_scheduling:
            if not sched.is_empty():
                outputs += self.execute_sync(sched)
            return self.outputs_of(outputs)
        launched = None
        if not sched.is_empty():
            launched = self.launch(sched, outputs)
        previous, self.in_flight = self.in_flight, launched
        if previous is not None:
            outputs += self.complete(*previous)
        return self.outputs_of(outputs)

    def launch(
        self, sched: SchedulerOutput, outputs: list[EngineCoreOutput]
    ) -> tuple[SchedulerOutput, list[bool], PendingOutput] | None:
        """Launch a step and commit it. While some request's sampling needs the previous step's
        tokens on the host (Request.needs_host_tokens), the step's forward is launched first,
        then the step in flight completes (its outputs are added to outputs), then this step's
        sampling is launched: the device computes the forward meanwhile. None if a launch
        raised: then the step in flight completed and this one ran synchronously, one request
        at a time where it must."""
        self.mark_scheduled(sched)
        try:
            fwd = self.runner.launch_forward(sched)
        except Exception:
            return self.launch_failed(sched, outputs)
        if self.scheduler.num_needing_host_tokens and self.in_flight is not None:
            outputs += self.complete(*self.in_flight)
            self.in_flight = None
        try:
            pending = self.runner.launch_sample(fwd, self.bitmask_fn(sched))
        except Exception:
            return self.launch_failed(sched, outputs)
        return sched, self.scheduler.commit_launch(sched), pending

    def launch_failed(self, sched: SchedulerOutput, outputs: list[EngineCoreOutput]) -> None:
        logger.exception("launching a step of %d request(s) failed", len(sched.requests))
        if self.in_flight is not None:  # the step's pending tokens come back first
            outputs += self.complete(*self.in_flight)
            self.in_flight = None
        outputs += self.execute_sync(sched)

    def complete(
        self, sched: SchedulerOutput, samples: list[bool], pending: PendingOutput
    ) -> list[EngineCoreOutput]:
        """Wait for a launched step's tokens and hand them to the scheduler."""
        runner_out = pending.result()
        self.num_steps += 1
        updates = self.scheduler.complete(sched, samples, runner_out.sampled_token_ids)
        return self.request_outputs(sched, runner_out, updates)

    def execute_sync(self, sched: SchedulerOutput) -> list[EngineCoreOutput]:
        """Run a step to its end (failing requests isolated) and update the scheduler."""
        self.mark_scheduled(sched)
        runner_out, failed = self.execute_isolated(sched, self.bitmask_fn(sched))
        self.num_steps += 1
        outputs = [
            EngineCoreOutput(req.request_id, [], finish_reason="error", error=req.error)
            for req in failed
        ]
        updates = self.scheduler.update_from_output(sched, runner_out.sampled_token_ids)
        return outputs + self.request_outputs(sched, runner_out, updates)

    @staticmethod
    def mark_scheduled(sched: SchedulerOutput) -> None:
        now = time.monotonic()
        for req in sched.requests:
            if req.scheduled_time is None:  # for the queue-time metric, sent with its 1st token
                req.scheduled_time = now

    def request_outputs(
        self,
        sched: SchedulerOutput,
        runner_out: ModelRunnerOutput,
        updates: list[tuple[Request, bool]],
    ) -> list[EngineCoreOutput]:
        """The step's new tokens (and scored prompt chunks) per request, as they go out."""
        outputs = []
        logprobs_of = {req.request_id: lp for req, lp in zip(sched.requests, runner_out.logprobs)}
        prompt_lps_of = {
            sched.requests[row].request_id: lps for row, lps in runner_out.prompt_logprobs.items()
        }
        for req, got_token in updates:
            prompt_lps = prompt_lps_of.get(req.request_id)
            if prompt_lps:
                req.num_prompt_logprobs += len(prompt_lps)
            if not got_token:
                if prompt_lps:  # a prompt chunk scored, no token yet
                    outputs.append(
                        EngineCoreOutput(req.request_id, [], new_prompt_logprobs=prompt_lps)
                    )
                continue
            if self.structured is not None:
                self.structured.accept(req, req.all_token_ids[-1])
                if req.status.finished:
                    self.structured.forget(req.request_id)
            lp = logprobs_of[req.request_id]
            outputs.append(
                EngineCoreOutput(
                    request_id=req.request_id,
                    new_token_ids=[req.all_token_ids[-1]],
                    new_logprobs=None if lp is None else [lp],
                    finish_reason=req.status.finish_reason,
                    stop_reason=req.stop_reason,
                    num_cached_tokens=max(req.num_cached_tokens, 0),
                    scheduled_time=(
                        req.scheduled_time if req.num_tokens - req.num_prompt_tokens == 1 else None
                    ),
                    new_prompt_logprobs=prompt_lps,
                )
            )
        return outputs

    def outputs_of(self, outputs: list[EngineCoreOutput]) -> EngineCoreOutputs:
        with_graph_stats = (
            self.num_steps % GRAPH_STATS_EVERY == 0 or not self.has_unfinished_requests()
        )
        return EngineCoreOutputs(
            outputs=outputs,
            scheduler_stats=self.stats(with_graph_stats),
            timestamp=time.monotonic(),
        )

    def bitmask_fn(self, sched: SchedulerOutput) -> BitmaskFn | None:
        """The step's structured-output bitmask fill, for the runner to call while the device
        computes the logits; None without structured outputs."""
        if self.structured is None or not self.structured.matchers:
            return None
        return functools.partial(self.grammar_bitmask, sched)

    def grammar_bitmask(self, sched: SchedulerOutput) -> torch.Tensor | None:
        """[R, ceil(V / 32)] int32 host bitmask of the step, None without structured outputs."""
        if self.structured is None or not self.structured.matchers:
            return None
        return self.structured.grammar_bitmask(sched.requests, self.sampling_rows(sched))

    @staticmethod
    def sampling_rows(sched: SchedulerOutput) -> list[bool]:
        """Per request of the step: whether it samples a token (a prefill chunk may not)."""
        return [
            r.num_computed_tokens + n >= r.num_tokens
            for r, n in zip(sched.requests, sched.num_scheduled_tokens)
        ]

    def execute_isolated(
        self, sched: SchedulerOutput, grammar_bitmask: BitmaskFn | None = None
    ) -> tuple[ModelRunnerOutput, list[Request]]:
        """Run the step; if it raises, run each request alone and finish those that fail alone
        with an error (their results are placeholders, skipped by the scheduler)."""
        try:
            return self._execute(sched, grammar_bitmask), []
        except Exception as batch_error:
            if self.workers is not None:
                # a failed step at tp > 1 is a broken group (a dead rank, or ranks out of step
                # that a per-request retry would only desync further): fatal, naming the dead
                # rank when the watchdog sees one
                self.workers.check_alive(wait_s=WORKER_DEATH_WAIT_S)
                raise
            logger.exception("a step of %d request(s) failed; isolating", len(sched.requests))
            if len(sched.requests) == 1:
                results: list[ModelRunnerOutput | Exception] = [batch_error]
            else:
                results = [
                    self._execute_alone(sched, i, grammar_bitmask)
                    for i in range(len(sched.requests))
                ]
            failed = [r for r, res in zip(sched.requests, results) if isinstance(res, Exception)]
            if len(results) > 1 and len(failed) == len(results):
                raise  # nothing runs: the engine is broken, not one request
        token_ids: list[int] = []
        logprobs: list[Any] = []
        prompt_logprobs = {}
        for i, (req, res) in enumerate(zip(sched.requests, results)):
            if isinstance(res, Exception):
                req.error = f"the request failed in the engine: {type(res).__name__}: {res}"
                token_ids.append(-1)  # a placeholder: the scheduler skips finished requests
                logprobs.append(None)
            else:
                token_ids.extend(res.sampled_token_ids)
                logprobs.extend(res.logprobs)
                if 0 in res.prompt_logprobs:
                    prompt_logprobs[i] = res.prompt_logprobs[0]
        failed_ids = [r.request_id for r in failed]
        self.scheduler.finish_requests(failed_ids, RequestStatus.FINISHED_ERROR)
        if self.structured is not None:
            for rid in failed_ids:
                self.structured.forget(rid)
        return ModelRunnerOutput(token_ids, logprobs, prompt_logprobs), failed

    def _execute(
        self, sched: SchedulerOutput, grammar_bitmask: BitmaskFn | None
    ) -> ModelRunnerOutput:
        """The runner's step; a step without structured outputs passes the schedule alone."""
        if grammar_bitmask is None:
            return self.runner.execute_model(sched)
        return self.runner.execute_model(sched, grammar_bitmask)

    def _execute_alone(
        self, sched: SchedulerOutput, i: int, grammar_bitmask: BitmaskFn | None
    ) -> ModelRunnerOutput | Exception:
        alone = SchedulerOutput(
            [sched.requests[i]], [sched.num_scheduled_tokens[i]], [sched.block_ids[i]]
        )
        row = None
        if grammar_bitmask is not None:

            def row() -> torch.Tensor | None:
                full = grammar_bitmask()
                return None if full is None else full[i : i + 1]

        try:
            return self._execute(alone, row)
        except Exception as e:  # noqa: BLE001 - this request's own failure, reported by the caller
            return e

    def stats(self, with_graph_stats: bool = True) -> SchedulerStats:
        s = self.scheduler
        return SchedulerStats(
            num_running=s.num_running,
            num_waiting=s.num_waiting,
            kv_cache_usage=s.kv.usage,
            num_preemptions=s.num_preemptions,
            num_steps=self.num_steps,
            prefix_cache_queries=s.kv.prefix_cache_queries,
            prefix_cache_hits=s.kv.prefix_cache_hits,
            graph_stats=self.runner.graph_stats.snapshot() if with_graph_stats else None,
        )

    def shutdown(self) -> None:
        """Release the device memory the core holds (graphs, KV cache, weights) now, not when
        the last reference goes: an in-process engine may share its process with the next.
        Then the worker ranks stop and this process leaves the tensor-parallel group."""
        if self.structured is not None:
            self.structured.shutdown()
        self.runner.release()
        self.stop_workers()

    def stop_workers(self) -> None:
        if self.workers is not None:
            from vgraph.distributed.parallel_state import destroy_tensor_parallel

            self.workers.shutdown()
            self.workers = None
            destroy_tensor_parallel()


def start_tp_workers(config: VGraphConfig, on_death: Callable[[str], None] | None) -> TPWorkers:
    """Spawn ranks 1..tp-1 and join the group as rank 0 (blocks until they have joined)."""
    from vgraph.distributed.parallel_state import init_tensor_parallel
    from vgraph.distributed.tp_workers import TPWorkers

    workers = TPWorkers(config, on_death)
    try:
        tp = config.parallel_config.tensor_parallel_size
        init_tensor_parallel(0, tp, config.device, workers.rendezvous_file)
    except BaseException:
        workers.shutdown()
        raise
    return workers

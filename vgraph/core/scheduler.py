"""Token-budget scheduler (FCFS, chunked prefill, preemption by recompute) -> SchedulerOutput.

One `schedule()` call decides the next step:
  0. fairness: a group (the requests fanned out from one user request) that has requests waiting
     and none running is starved; if the sequence slots or the KV blocks are full, the newest
     running request of the group holding the most (two or more) is preempted to make room, so
     one big fan-out request cannot hold the engine while a small one waits;
  1. running requests first, in admission order: each wants `num_tokens - num_computed_tokens`
     tokens (1 for a decode, a chunk for a prefill), capped by the remaining token budget;
     if the pool can't hold them, the newest running request is preempted (blocks freed,
     progress reset, back to the head of the waiting queue) until it fits;
  2. then waiting requests while budget, blocks and max_num_seqs allow: the oldest request of
     each starved group first, then the rest oldest first (a prompt longer than the budget is
     split into chunks across steps); a request admitted with prefix-cache hits starts with
     those whole blocks computed and schedules only the rest;
  3. the step is a list of (request, num_scheduled_tokens); decodes and prefill chunks mix freely.
`update_from_output()` advances num_computed_tokens, appends sampled tokens and finishes requests:
`commit_launch()` (the progress) then `complete()` (the tokens). With async scheduling the engine
core calls the two apart: it commits a step when it launches it and schedules the next one
before the step's tokens are back; a request's pending token (num_pending_tokens) is then the
next step's input (read on the device), a request whose pending tokens already reach max_tokens
or max_model_len is not scheduled again, and a preempted request waits until its pending token
is back. It does no I/O and knows nothing of tensors.
"""

from __future__ import annotations

import contextlib
from collections import Counter, deque
from dataclasses import dataclass, field

from vgraph.config import SchedulerConfig
from vgraph.core.kv_cache_manager import KVCacheManager
from vgraph.request import Request, RequestStatus


@dataclass
class SchedulerOutput:
    """One step: requests in batch order and how many tokens each computes."""

    requests: list[Request] = field(default_factory=list)
    num_scheduled_tokens: list[int] = field(default_factory=list)
    block_ids: list[list[int]] = field(default_factory=list)  # each request's whole block list
    finished_req_ids: set[str] = field(default_factory=set)  # since the previous step
    num_preempted: int = 0
    # some request hit prefix-cache blocks another request computes in this same step: its
    # attention reads KV this step writes (attention must follow the whole step's cache write)
    same_step_kv: bool = False

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens)

    @property
    def is_uniform_decode(self) -> bool:
        """Every request computes exactly one token over KV of earlier steps (the full-graph
        case; a step that reads KV it writes itself, same_step_kv, is not one)."""
        return (
            bool(self.requests)
            and not self.same_step_kv
            and all(n == 1 for n in self.num_scheduled_tokens)
        )

    def is_empty(self) -> bool:
        return not self.requests

    def samples(self) -> list[bool]:
        """Per request, before the step is committed: whether the step samples a token for it
        (its chunk reaches its last token); a partial prefill chunk's row is computed and
        dropped, and an aborted request's too. The sampler draws from a seeded request's
        generator only for these rows, so its tokens do not depend on how its prompt was cut
        into chunks (vLLM rewinds the generator instead)."""
        return [
            not req.status.finished
            and req.num_computed_tokens + n == req.num_tokens + req.num_pending_tokens
            for req, n in zip(self.requests, self.num_scheduled_tokens)
        ]


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_cache_manager: KVCacheManager) -> None:
        # a request that outgrows the whole pool would preempt itself forever (a silent hang)
        needed = kv_cache_manager.blocks_needed(config.max_model_len)
        if kv_cache_manager.num_blocks < needed:
            raise ValueError(
                f"max_model_len={config.max_model_len} needs {needed} KV cache blocks of "
                f"{kv_cache_manager.block_size} tokens, but the cache has only "
                f"{kv_cache_manager.num_blocks} blocks; lower max_model_len to at most "
                f"{kv_cache_manager.num_blocks * kv_cache_manager.block_size} or give the cache "
                f"more memory (gpu_memory_utilization, cpu_kv_cache_bytes, num_gpu_blocks_override)"
            )
        self.config = config
        self.kv = kv_cache_manager
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self._finished_since_last_step: set[str] = set()
        self._same_step_kv = False  # of the step being scheduled (SchedulerOutput.same_step_kv)
        self.num_preemptions = 0
        # unfinished requests whose sampling waits for the previous step's tokens on the host
        self.num_needing_host_tokens = 0

    # ---- admission ------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request_id={request.request_id!r} is already in use")
        self.requests[request.request_id] = request
        self.waiting.append(request)
        if request.needs_host_tokens:
            self.num_needing_host_tokens += 1

    def abort_requests(self, request_ids: list[str]) -> list[Request]:
        return self.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED)

    def finish_requests(self, request_ids: list[str], status: RequestStatus) -> list[Request]:
        """End these requests (those still unfinished) with a finished status; frees blocks."""
        assert status.finished, status
        ended = []
        for rid in request_ids:
            req = self.requests.get(rid)
            if req is not None and not req.status.finished:
                self._finish(req, status)
                ended.append(req)
        return ended

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    # ---- one step -------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(finished_req_ids=self._finished_since_last_step)
        self._finished_since_last_step = set()
        self.kv.begin_step()
        self._same_step_kv = False
        budget = self.config.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        starved = self._starved_group_heads()

        # 0. room for starved groups, taken from the group that holds the most sequences
        for head in starved:
            if not self._is_full_for(head):
                break
            victim = self._fairness_victim()
            if victim is None:
                break
            self.running.remove(victim)
            self._preempt(victim)
            out.num_preempted += 1

        # 1. running requests; preempt from the back when blocks run out
        num_memory_preempted = 0
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if req.num_pending_tokens and self._pending_tokens_end(req):
                i += 1  # it finishes when its launched steps' tokens are back
                continue
            num_new = min(req.num_tokens + req.num_pending_tokens - req.num_computed_tokens, budget)
            assert num_new > 0, req
            while self.kv.allocate_slots(req, num_new) is None:
                victim = self.running.pop()
                self._preempt(victim)
                out.num_preempted += 1
                num_memory_preempted += 1
                if victim is req:
                    break
            else:
                scheduled.append((req, num_new))
                budget -= num_new
                i += 1
                continue
            break  # req itself was preempted: nothing after it is left to schedule

        # 2. waiting requests: starved groups' heads first, then FCFS; none if memory is short
        if num_memory_preempted == 0:
            for req in starved:
                if not self._admit(req, budget, scheduled):
                    break
                budget -= scheduled[-1][1]
            while self.waiting and self._admit(self.waiting[0], budget, scheduled):
                budget -= scheduled[-1][1]

        for req, n in scheduled:
            out.requests.append(req)
            out.num_scheduled_tokens.append(n)
            out.block_ids.append(self.kv.get_block_ids(req.request_id))
        out.same_step_kv = self._same_step_kv
        return out

    def _admit(self, req: Request, budget: int, scheduled: list[tuple[Request, int]]) -> bool:
        """Move a waiting request to running with a first chunk, if budget, seats and blocks
        allow; returns whether it was admitted (then its chunk is the last of `scheduled`)."""
        if budget <= 0 or len(self.running) >= self.config.max_num_seqs:
            return False
        if req.num_pending_tokens:  # preempted while a launched step samples its next token
            return False
        hit_blocks, num_hit = self.kv.get_computed_blocks(req)
        num_new = min(req.num_tokens - req.num_computed_tokens - num_hit, budget)
        if self.kv.allocate_slots(req, num_new, hit_blocks) is None:
            return False
        self.kv.record_lookup(req, num_hit)
        if hit_blocks and self.kv.registered_this_step(hit_blocks):
            self._same_step_kv = True
        req.num_computed_tokens += num_hit
        if req.num_cached_tokens < 0:  # the first admission's hits, as vLLM reports them
            req.num_cached_tokens = num_hit
        self.waiting.remove(req)
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        scheduled.append((req, num_new))
        return True

    def _starved_group_heads(self) -> list[Request]:
        """The oldest waiting request of each group that has none running, oldest first."""
        if not self.waiting:
            return []
        running_groups = {r.group_id for r in self.running}
        heads: dict[str, Request] = {}
        for req in self.waiting:
            if req.group_id not in running_groups and req.group_id not in heads:
                heads[req.group_id] = req
        return list(heads.values())

    def _is_full_for(self, req: Request) -> bool:
        """No seat, or too few free blocks for this waiting request's first chunk."""
        if len(self.running) >= self.config.max_num_seqs:
            return True
        first_chunk = min(req.num_tokens, self.config.max_num_batched_tokens)
        return self.kv.num_free_blocks < self.kv.blocks_needed(first_chunk)

    def _fairness_victim(self) -> Request | None:
        """The newest running request of the group with the most running, if it has two or more."""
        counts = Counter(r.group_id for r in self.running)
        if not counts:
            return None
        group, num = counts.most_common(1)[0]
        if num < 2:
            return None
        return next(r for r in reversed(self.running) if r.group_id == group)

    def _preempt(self, req: Request) -> None:
        self.kv.free(req)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    def _pending_tokens_end(self, req: Request) -> bool:
        """Whether the tokens its launched steps sample bring the request to its end (max_tokens
        or max_model_len): no further step is scheduled for it."""
        max_tokens = req.sampling_params.max_tokens
        n = req.num_pending_tokens
        return (max_tokens is not None and req.num_output_tokens + n >= max_tokens) or (
            req.num_tokens + n >= self.config.max_model_len
        )

    # ---- results --------------------------------------------------------------------------
    def update_from_output(
        self, sched: SchedulerOutput, sampled_token_ids: list[int]
    ) -> list[tuple[Request, bool]]:
        """A step that ran: commit_launch, then complete with its tokens."""
        return self.complete(sched, self.commit_launch(sched), sampled_token_ids)

    def commit_launch(self, sched: SchedulerOutput) -> list[bool]:
        """Advance the progress of a launched step; returns, per scheduled request, whether the
        step samples a token for it (its chunk reaches its last token; a partial prefill chunk
        does not). That token is pending until complete()."""
        samples = sched.samples()
        for req, n, sampled in zip(sched.requests, sched.num_scheduled_tokens, samples):
            if req.status.finished:  # aborted while the step ran
                continue
            req.num_computed_tokens += n
            if sampled:
                req.num_pending_tokens += 1
        return samples

    def complete(
        self, sched: SchedulerOutput, samples: list[bool], sampled_token_ids: list[int]
    ) -> list[tuple[Request, bool]]:
        """A committed step's tokens are back: append them (in step order) and finish requests
        that stop; returns (request, got_new_token) for each request of the step still
        unfinished when the step began to complete."""
        results = []
        for req, sampled, token in zip(sched.requests, samples, sampled_token_ids):
            if req.status.finished:  # aborted, or stopped by an earlier step's token
                continue
            if sampled:
                req.num_pending_tokens -= 1
                req.append_output_token(token)
                self._check_stop(req, token)
            results.append((req, sampled))
        return results

    def _check_stop(self, req: Request, token: int) -> None:
        params = req.sampling_params
        if req.num_output_tokens >= params.min_tokens:
            if not params.ignore_eos and token in req.eos_token_ids:
                self._finish(req, RequestStatus.FINISHED_STOPPED)
                return
            if params.stop_token_ids and token in params.stop_token_ids:
                req.stop_reason = token
                self._finish(req, RequestStatus.FINISHED_STOPPED)
                return
        if (params.max_tokens is not None and req.num_output_tokens >= params.max_tokens) or (
            req.num_tokens >= self.config.max_model_len
        ):
            self._finish(req, RequestStatus.FINISHED_LENGTH)

    def _finish(self, req: Request, status: RequestStatus) -> None:
        req.status = status
        if req.needs_host_tokens:
            self.num_needing_host_tokens -= 1
        if req in self.running:
            self.running.remove(req)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(req)
        self.kv.free(req)
        self.requests.pop(req.request_id, None)
        self._finished_since_last_step.add(req.request_id)

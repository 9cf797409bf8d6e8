"""Request: the engine core's view of one sequence; `num_computed_tokens` is its only progress.

Lifecycle (owned by the scheduler):
  1. WAITING: admitted by the engine core, no KV blocks.
  2. RUNNING: holds blocks; each step computes `num_scheduled_tokens` more of `all_token_ids`.
  3. PREEMPTED: blocks freed, num_computed_tokens reset to 0, back at the head of the queue
     (recompute: prompt + outputs so far are prefilled again when it resumes).
  4. FINISHED_*: blocks freed; the reason travels to the frontend (FINISHED_ERROR: this request
     alone failed inside a step; the engine core goes on with the others).
With async scheduling a step is committed when it is launched: num_computed_tokens counts the
positions whose KV the launched steps write, and num_pending_tokens the tokens they sample that
the host has not seen yet (the next step reads them on the device); both a step's launch and its
results are the scheduler's (commit_launch, complete).
A request belongs to a group (the user request it was fanned out from: its n samples and, in the
server, its prompts); the scheduler shares its sequence slots fairly between groups.
"""

from __future__ import annotations

import enum

from vgraph.sampling_params import SamplingParams


class RequestStatus(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH = 4
    FINISHED_ABORTED = 5
    FINISHED_ERROR = 6

    @property
    def finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED

    @property
    def finish_reason(self) -> str | None:
        return _FINISH_REASONS.get(self)


_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_ERROR: "error",
}


class Request:
    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams,
        eos_token_ids: frozenset[int],
        arrival_time: float = 0.0,
        group_id: str | None = None,
        cache_salt: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.group_id = request_id if group_id is None else group_id
        # vLLM's: mixed into the root of its prefix-cache hashes; only the same salt shares
        self.cache_salt = cache_salt
        self.prompt_token_ids = prompt_token_ids
        self.sampling_params = sampling_params
        self.eos_token_ids = eos_token_ids
        self.arrival_time = arrival_time
        self.scheduled_time: float | None = None  # time.monotonic() of its first step
        self.status = RequestStatus.WAITING
        self.all_token_ids: list[int] = list(prompt_token_ids)  # prompt, then outputs
        self.num_computed_tokens = 0
        self.num_pending_tokens = 0  # sampled by launched steps, not yet in all_token_ids
        # its sampling waits for the previous step's tokens on the host (async scheduling)
        self.needs_host_tokens = sampling_params.needs_host_tokens
        self.num_cached_tokens = -1  # prompt tokens found in the prefix cache (-1: not admitted)
        self.num_preemptions = 0
        self.num_prompt_logprobs = 0  # prompt positions whose logprobs were reported
        self.stop_reason: int | str | None = None
        self.error: str | None = None  # why it ended with FINISHED_ERROR

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[len(self.prompt_token_ids) :]

    def append_output_token(self, token_id: int) -> None:
        self.all_token_ids.append(token_id)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, {self.status.name}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens})"
        )

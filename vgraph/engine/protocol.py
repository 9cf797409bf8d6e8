"""Messages between the frontend and the engine core: msgspec Structs, encoded as msgpack.

Every type on the wire is declared here with explicit fields; nothing is ever pickled.
"""

from __future__ import annotations

import enum

import msgspec

from vgraph.cudagraph.counters import GraphStats
from vgraph.outputs import TokenLogprobs
from vgraph.sampling_params import SamplingParams


class EngineCoreRequest(msgspec.Struct, array_like=True, omit_defaults=True):
    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    eos_token_ids: list[int]
    arrival_time: float = 0.0
    group_id: str | None = None  # the user request it belongs to (None: its own request_id)
    # vLLM's: its prefix-cache blocks are shared only with requests of the same salt
    cache_salt: str | None = None


class EngineCoreOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    request_id: str
    new_token_ids: list[int]
    new_logprobs: list[TokenLogprobs] | None = None
    finish_reason: str | None = None  # "stop", "length", "abort", "error"
    stop_reason: int | str | None = None
    error: str | None = None  # set with finish_reason "error": this request only failed
    num_cached_tokens: int = 0  # prompt tokens its first admission found in the prefix cache
    # with a request's first token: when it was first scheduled (time.monotonic(), the same
    # clock as arrival_time on one host), for the queue and prefill time metrics
    scheduled_time: float | None = None
    # prompt tokens scored this step (prompt_logprobs), in prompt order from the second token
    new_prompt_logprobs: list[TokenLogprobs] | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class SchedulerStats(msgspec.Struct, array_like=True, omit_defaults=True):
    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    num_preemptions: int = 0
    num_steps: int = 0
    prefix_cache_queries: int = 0  # tokens looked up in the prefix cache, since start-up
    prefix_cache_hits: int = 0  # of which were found cached
    # what the steps replayed; sent every GRAPH_STATS_EVERY steps and on the step before idle
    # (its histograms cost tens of microseconds to encode and decode), None in between
    graph_stats: GraphStats | None = None


class EngineCoreOutputs(msgspec.Struct, array_like=True, omit_defaults=True):
    outputs: list[EngineCoreOutput] = []
    scheduler_stats: SchedulerStats | None = None
    timestamp: float = 0.0


class EngineCoreRequestType(enum.IntEnum):
    ADD = 0
    ABORT = 1
    UTILITY = 2  # a named call on the core (stats, reset); answered by a UtilityOutput
    SHUTDOWN = 3


class UtilityRequest(msgspec.Struct, array_like=True):
    call_id: int
    method: str
    args: list[str | int | float | bool | None] = []


class UtilityOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    call_id: int
    result: str | int | float | bool | dict | list | None = None
    error: str | None = None


class EngineCoreOutputType(enum.IntEnum):
    """Leading frame of every message from the engine core to the frontend."""

    OUTPUTS = 0  # EngineCoreOutputs of one step (or a stats-only update)
    UTILITY = 1  # UtilityOutput
    READY = 2  # EngineCoreReady: start-up finished, the core accepts requests
    STARTUP_ERROR = 3  # EngineCoreFailure: start-up failed; the process exits non-zero
    DEAD = 4  # EngineCoreFailure: the busy loop raised; the process exits non-zero


class EngineCoreReady(msgspec.Struct, array_like=True):
    num_kv_blocks: int
    block_size: int
    max_model_len: int
    vocab_size: int


class EngineCoreFailure(msgspec.Struct, array_like=True):
    error_type: str  # the exception's class name, for the log
    message: str
    traceback: str = ""
    user_error: bool = False  # a user's mistake (a ValueError): the frontend raises ValueError

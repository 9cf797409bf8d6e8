"""What rank 0 sends the worker ranks: one typed msgspec message per step, msgpack, never pickle.

A step carries the inputs as rank 0 prepared them (the scheduled token ids, each request's
computed and scheduled counts and block list) and rank 0's dispatch decision (runtime mode, graph
key, padded sizes): the dispatcher decides once, so ranks can never replay different graphs.
Workers hold no request state and do not sample: rank 0 alone turns logits into tokens.
build_tp_step makes rank 0's message; the worker's runner reads it (execute_broadcast_step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from vgraph.config.modes import CUDAGraphMode

if TYPE_CHECKING:
    import numpy as np

    from vgraph.core.scheduler import SchedulerOutput
    from vgraph.cudagraph.dispatcher import BatchDescriptor
    from vgraph.worker.input_batch import StepInputs


class TPStep(msgspec.Struct, tag=True, array_like=True):
    token_ids: bytes  # int64 [num_tokens]: the tokens this step computes, request after request
    num_computed: list[int]  # [num_reqs] tokens each request had computed before this step
    num_scheduled: list[int]  # [num_reqs] tokens each request computes in this step
    block_ids: list[list[int]]  # [num_reqs][blocks] each request's whole block list
    mode: str  # runtime mode: CUDAGraphMode name (NONE, PIECEWISE, FULL)
    key: tuple[int, int | None, bool] | None  # BatchDescriptor fields, or None when eager
    num_tokens_padded: int | None
    num_reqs_padded: int | None
    num_common_prefix_blocks: int = 0  # cascade attention's shared prefix (0: plain attention)
    same_step_kv: bool = False  # SchedulerOutput.same_step_kv


class TPShutdown(msgspec.Struct, tag=True, array_like=True):
    pass


def build_tp_step(
    token_ids: np.ndarray,  # [num_tokens] int64: the input ids rank 0 just prepared
    sched: SchedulerOutput,
    step: StepInputs,
    mode: CUDAGraphMode,
    key: BatchDescriptor | None,
    num_common_prefix_blocks: int = 0,
) -> TPStep:
    """The step for the worker ranks: the inputs rank 0 just prepared and its dispatch."""
    return TPStep(
        token_ids=token_ids.tobytes(),
        num_computed=[r.num_computed_tokens for r in sched.requests],
        num_scheduled=list(sched.num_scheduled_tokens),
        block_ids=sched.block_ids,
        mode=mode.name,
        key=None if key is None else tuple(key),
        num_tokens_padded=None if key is None else step.num_tokens_padded,
        num_reqs_padded=step.num_reqs_padded if mode is CUDAGraphMode.FULL else None,
        num_common_prefix_blocks=num_common_prefix_blocks,
        same_step_kv=sched.same_step_kv,
    )


ENCODER = msgspec.msgpack.Encoder()
DECODER = msgspec.msgpack.Decoder(TPStep | TPShutdown)

"""What rank 0 sends the worker ranks: one typed msgspec message per step, msgpack, never pickle.

A step carries the inputs as rank 0 prepared them (the scheduled token ids, each request's
computed and scheduled counts and block list) and rank 0's dispatch decision (runtime mode, graph
key, padded sizes): the dispatcher decides once, so ranks can never replay different graphs.
Workers hold no request state and do not sample: rank 0 alone turns logits into tokens.
"""

from __future__ import annotations

import msgspec


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


class TPShutdown(msgspec.Struct, tag=True, array_like=True):
    pass


ENCODER = msgspec.msgpack.Encoder()
DECODER = msgspec.msgpack.Decoder(TPStep | TPShutdown)

"""Async scheduling's token feed: a request whose next token is pending gets the last step's
sampled id at its token's place on the device, in the steady-state copy (request i was row i)
and in the indexed path (rows reordered, a prefill chunk beside the decodes); a request whose
token is on the host keeps the host's id."""

from __future__ import annotations

import torch

from vgraph.core.scheduler import SchedulerOutput
from vgraph.request import Request
from vgraph.sampling_params import SamplingParams
from vgraph.worker.input_batch import InputBuffers
from vgraph.worker.token_feed import DeviceTokenFeed

BLOCK_SIZE = 16


def request(rid: str, num_tokens: int, computed: int) -> Request:
    req = Request(rid, list(range(100, 100 + num_tokens)), SamplingParams(), frozenset())
    req.num_computed_tokens = computed
    req.num_pending_tokens = int(computed == num_tokens)  # the next token is the last step's
    return req


def fed_ids(last: list[Request], sampled: list[int], sched: SchedulerOutput) -> list[int]:
    """The step's device input ids after the feed, the last step's rows being `last`."""
    bufs = InputBuffers(64, 8, 8, BLOCK_SIZE, torch.device("cpu"))
    feed = DeviceTokenFeed(8, torch.device("cpu"))
    feed.remember(last, torch.tensor(sampled))
    step = bufs.prepare(sched, pending=True)
    ids = step.layout.gpu.input_ids
    feed.apply(sched.requests, step, ids)
    return ids[: step.num_tokens].tolist()


def step_of(reqs: list[Request], num_scheduled: list[int]) -> SchedulerOutput:
    return SchedulerOutput(
        requests=reqs,
        num_scheduled_tokens=num_scheduled,
        block_ids=[[i + 1, i + 9] for i in range(len(reqs))],
    )


def test_steady_decoding_copies_the_last_rows() -> None:
    # 3 decodes, each computed up to its last known token: the next one is pending
    reqs = [request(f"r{i}", 10 + i, 10 + i) for i in range(3)]
    assert fed_ids(reqs, [7, 8, 9], step_of(reqs, [1, 1, 1])) == [7, 8, 9]


def test_reordered_rows_and_a_prefill_chunk_take_the_indexed_path() -> None:
    a, b, c = (request(rid, 10, 10) for rid in "abc")
    last = [a, b, c]  # sampled 7, 8, 9
    prefill = request("p", 20, 4)  # 5 prompt tokens of its chunk are on the host
    known = request("k", 12, 11)  # its next token (index 11) is on the host
    sched = step_of([c, prefill, known, a], [1, 5, 1, 1])
    assert fed_ids(last, [7, 8, 9], sched) == [9, 104, 105, 106, 107, 108, 111, 7]

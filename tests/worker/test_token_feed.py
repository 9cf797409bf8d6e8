"""Async scheduling's token feed: a request whose next token is pending gets the last step's
sampled id at its token's place in the ids the model reads (decodes in the last step's order,
rows reordered, a prefill chunk beside the decodes); a request whose token is on the host keeps
the host's id; the input copy leaves the sampled ids in the feed slots alone."""

from __future__ import annotations

import pytest
import torch

from vgraph.core.scheduler import SchedulerOutput
from vgraph.request import Request
from vgraph.sampling_params import SamplingParams
from vgraph.worker.input_batch import InputBuffers
from vgraph.worker.token_feed import DeviceTokenFeed, feed_in_graph

BLOCK_SIZE = 16


def request(rid: str, num_tokens: int, computed: int) -> Request:
    req = Request(rid, list(range(100, 100 + num_tokens)), SamplingParams(), frozenset())
    req.num_computed_tokens = computed
    req.num_pending_tokens = int(computed == num_tokens)  # the next token is the last step's
    return req


def fed_ids(last: list[Request], sampled: list[int], sched: SchedulerOutput) -> list[int]:
    """The step's token ids as the model reads them, the last step's rows being `last`."""
    bufs = InputBuffers(64, 8, 8, BLOCK_SIZE, torch.device("cpu"), feed_slots=8)
    feed = DeviceTokenFeed(bufs, torch.device("cpu"))
    feed.remember(last, torch.tensor(sampled))
    step = bufs.prepare(sched, copy=False, pending=True)
    feed.fill(sched.requests, step)
    feed.copy_and_gather(step)
    assert feed.slots[: len(sampled)].tolist() == sampled  # the copy starts after the slots
    return feed.input_ids(step)[: step.num_tokens].tolist()


def step_of(reqs: list[Request], num_scheduled: list[int]) -> SchedulerOutput:
    return SchedulerOutput(
        requests=reqs,
        num_scheduled_tokens=num_scheduled,
        block_ids=[[i + 1, i + 9] for i in range(len(reqs))],
    )


def test_steady_decoding_reads_the_last_rows() -> None:
    # 3 decodes, each computed up to its last known token: the next one is pending
    reqs = [request(f"r{i}", 10 + i, 10 + i) for i in range(3)]
    assert fed_ids(reqs, [7, 8, 9], step_of(reqs, [1, 1, 1])) == [7, 8, 9]


def test_reordered_rows_and_a_prefill_chunk() -> None:
    a, b, c = (request(rid, 10, 10) for rid in "abc")
    last = [a, b, c]  # sampled 7, 8, 9
    prefill = request("p", 20, 4)  # 5 prompt tokens of its chunk are on the host
    known = request("k", 12, 11)  # its next token (index 11) is on the host
    sched = step_of([c, prefill, known, a], [1, 5, 1, 1])
    assert fed_ids(last, [7, 8, 9], sched) == [9, 104, 105, 106, 107, 108, 111, 7]


def test_feed_in_graph_switch_refuses_a_bad_value(monkeypatch) -> None:
    assert feed_in_graph()
    monkeypatch.setenv("VGRAPH_FEED_IN_GRAPH", "0")
    assert not feed_in_graph()
    monkeypatch.setenv("VGRAPH_FEED_IN_GRAPH", "yes")
    with pytest.raises(ValueError, match="VGRAPH_FEED_IN_GRAPH must be 0 or 1, got 'yes'"):
        feed_in_graph()

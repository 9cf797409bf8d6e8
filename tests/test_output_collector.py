"""The per-request OutputCollector between AsyncLLM's output handler and a stream: a delta output
that finds the previous one still waiting is merged into it (RequestOutput.merge_delta), an
exception takes its place, get() waits for a put."""

from __future__ import annotations

import asyncio

import pytest

from vgraph.engine.async_llm import OutputCollector
from vgraph.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput


def delta(
    *comps: CompletionOutput, finished: bool = False, cached: int = 0, t: float = 0.0
) -> RequestOutput:
    return RequestOutput(
        "r",
        None,
        [1, 2],
        list(comps),
        finished=finished,
        metrics=RequestMetrics(1.0, last_token_time=t),
        num_cached_tokens=cached,
    )


def comp(index: int, text: str, ids: list[int], lp: float | None = None, **kw) -> CompletionOutput:
    logprobs = None if lp is None else [{i: Logprob(lp, 1)} for i in ids]
    return CompletionOutput(index, text, ids, lp, logprobs, **kw)


def test_merge_appends_each_sample_and_takes_the_newer_state() -> None:
    out = delta(comp(0, "He", [5], lp=-1.0), comp(1, "A", [9]), t=1.0)
    out.merge_delta(delta(comp(0, "llo", [6, 7], lp=-2.5), t=2.0, cached=16))
    out.merge_delta(
        delta(
            comp(1, "!", [10], finish_reason="stop", stop_reason="!"),
            comp(2, "x", [3]),
            finished=True,
            t=3.0,
            cached=16,
        )
    )
    first, second, third = out.outputs
    assert (first.text, first.token_ids, first.cumulative_logprob) == ("Hello", [5, 6, 7], -2.5)
    assert [list(d) for d in first.logprobs] == [[5], [6], [7]]
    assert first.finish_reason is None
    assert (second.text, second.token_ids) == ("A!", [9, 10])
    assert (second.finish_reason, second.stop_reason) == ("stop", "!")
    assert (third.index, third.token_ids) == (2, [3])
    assert out.finished and out.num_cached_tokens == 16 and out.metrics.last_token_time == 3.0


def test_merge_keeps_samples_in_index_order() -> None:
    out = delta(comp(1, "b", [2]))
    out.merge_delta(delta(comp(0, "a", [1])))
    assert [c.index for c in out.outputs] == [0, 1]


def test_collector_merges_what_the_consumer_has_not_taken() -> None:
    async def scenario() -> None:
        col = OutputCollector()
        col.put(delta(comp(0, "a", [1])))
        col.put(delta(comp(0, "b", [2])))
        got = await col.get()
        assert got.outputs[0].token_ids == [1, 2] and got.outputs[0].text == "ab"
        waiter = asyncio.create_task(col.get())
        await asyncio.sleep(0)  # the waiter is parked on the event
        assert not waiter.done()
        col.put(delta(comp(0, "c", [3]), finished=True))
        got = await asyncio.wait_for(waiter, 5)
        assert got.outputs[0].token_ids == [3] and got.finished

    asyncio.run(scenario())


def test_an_exception_replaces_the_waiting_output_and_stays() -> None:
    async def scenario() -> None:
        col = OutputCollector()
        col.put(delta(comp(0, "a", [1])))
        col.put(RuntimeError("boom"))
        col.put(delta(comp(0, "b", [2])))  # after the failure: dropped
        with pytest.raises(RuntimeError, match="boom"):
            raise await col.get()

    asyncio.run(scenario())

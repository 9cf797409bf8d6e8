"""Scheduler: token budget, chunked prefill, mixed steps, FCFS, max_num_seqs, preemption by
recompute, abort, and every way a request finishes. Fake requests, no model: each step's sampled
tokens are chosen by the test."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from vgraph.config import SchedulerConfig
from vgraph.core.kv_cache_manager import KVCacheManager
from vgraph.core.scheduler import Scheduler, SchedulerOutput
from vgraph.request import Request, RequestStatus
from vgraph.sampling_params import SamplingParams

EOS = 2
TOKEN = 7  # an ordinary sampled token


def make_req(rid: str, num_prompt: int, **params: object) -> Request:
    return Request(
        rid,
        list(range(10, 10 + num_prompt)),
        SamplingParams(temperature=0.0, **params),
        frozenset({EOS}),
    )


def make_sched(
    budget: int = 8192, max_num_seqs: int = 256, num_blocks: int = 1000, max_model_len: int = 8192
) -> Scheduler:
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, max_model_len=max_model_len
    )
    return Scheduler(config, KVCacheManager(num_blocks, block_size=16))


def step(s: Scheduler, tokens: int | Sequence[int] = TOKEN) -> SchedulerOutput:
    """One schedule + update; `tokens` are the sampled ids (one per scheduled request)."""
    out = s.schedule()
    if isinstance(tokens, int):
        tokens = [tokens] * len(out.requests)
    s.update_from_output(out, list(tokens))
    return out


def plan(out: SchedulerOutput) -> list[tuple[str, int]]:
    return [(r.request_id, n) for r, n in zip(out.requests, out.num_scheduled_tokens)]


def held_blocks(s: Scheduler) -> int:
    return s.kv.num_blocks - s.kv.num_free_blocks


# ---- token budget, chunked prefill, mixed steps ---------------------------------------------


def test_token_budget_caps_each_step() -> None:
    s = make_sched(budget=25)
    for rid in "abc":
        s.add_request(make_req(rid, 10))
    out = step(s)
    assert plan(out) == [("a", 10), ("b", 10), ("c", 5)]
    assert out.total_num_scheduled_tokens == 25
    # next step: two decodes and the rest of c's prompt, in one SchedulerOutput
    out = step(s)
    assert plan(out) == [("a", 1), ("b", 1), ("c", 5)]
    assert not out.is_uniform_decode
    out = step(s)
    assert plan(out) == [("a", 1), ("b", 1), ("c", 1)] and out.is_uniform_decode


def test_chunked_prefill_splits_a_long_prompt() -> None:
    s = make_sched(budget=16)
    req = make_req("a", 40)
    s.add_request(req)
    chunks, got = [], []
    for _ in range(3):
        out = s.schedule()
        chunks.append(out.num_scheduled_tokens[0])
        got.append(s.update_from_output(out, [TOKEN])[0][1])
    assert chunks == [16, 16, 8]
    assert got == [False, False, True]  # a token is sampled only once the prompt is complete
    assert req.num_computed_tokens == 40
    assert req.output_token_ids == [TOKEN]
    assert plan(step(s)) == [("a", 1)]


def test_prefill_chunk_and_decodes_mix_in_one_step() -> None:
    s = make_sched(budget=16)
    s.add_request(make_req("a", 4))
    s.add_request(make_req("b", 3))
    step(s)  # both prefilled whole
    s.add_request(make_req("c", 30))
    out = step(s)
    assert plan(out) == [("a", 1), ("b", 1), ("c", 14)]
    out = step(s)
    assert plan(out) == [("a", 1), ("b", 1), ("c", 14)]
    out = step(s)
    assert plan(out) == [("a", 1), ("b", 1), ("c", 2)]  # c's last chunk yields its first token
    assert s.requests["c"].num_output_tokens == 1


def test_running_requests_come_before_waiting_ones() -> None:
    s = make_sched(budget=10)
    s.add_request(make_req("a", 9))
    step(s)  # a: prefill 9, now decoding
    s.add_request(make_req("b", 20))
    assert plan(step(s)) == [("a", 1), ("b", 9)]


# ---- FCFS and max_num_seqs ------------------------------------------------------------------


def test_fcfs_order_and_budget_go_to_the_oldest() -> None:
    s = make_sched(budget=10)
    for rid in "abc":
        s.add_request(make_req(rid, 8))
    assert plan(step(s)) == [("a", 8), ("b", 2)]
    assert [r.request_id for r in s.waiting] == ["c"]
    assert plan(step(s)) == [("a", 1), ("b", 6), ("c", 3)]


def test_max_num_seqs_limits_running_requests() -> None:
    s = make_sched(max_num_seqs=2)
    for rid in "abcd":
        s.add_request(make_req(rid, 5, max_tokens=2))
    assert plan(step(s)) == [("a", 5), ("b", 5)]
    assert s.num_running == 2 and s.num_waiting == 2
    out = step(s)  # a and b reach max_tokens=2 and finish
    assert plan(out) == [("a", 1), ("b", 1)]
    assert s.num_running == 0
    assert plan(step(s)) == [("c", 5), ("d", 5)]


# ---- preemption by recompute ----------------------------------------------------------------


def test_preemption_by_recompute() -> None:
    s = make_sched(num_blocks=4, max_model_len=64)
    a, b, c = make_req("a", 32), make_req("b", 32), make_req("c", 8)
    for r in (a, b):
        s.add_request(r)
    assert plan(step(s)) == [("a", 32), ("b", 32)]  # 2 + 2 blocks: the pool is full
    s.add_request(c)
    assert held_blocks(s) == 4 and b.num_output_tokens == 1

    # a's decode (token 33) needs a third block: b, the newest running request, is preempted
    out = step(s)
    assert plan(out) == [("a", 1)]
    assert out.num_preempted == 1 and s.num_preemptions == 1
    assert b.status == RequestStatus.PREEMPTED and b.num_preemptions == 1
    assert b.num_computed_tokens == 0
    assert s.kv.get_block_ids("b") == []
    assert list(s.waiting) == [b, c]  # back at the head, ahead of the older waiting c
    assert b not in s.running
    assert held_blocks(s) == 3
    assert b.output_token_ids == [TOKEN]  # outputs are kept; they are recomputed, not resampled


def test_preempted_request_resumes_with_prompt_and_outputs() -> None:
    s = make_sched(num_blocks=4, max_model_len=64)
    a, b = make_req("a", 32, max_tokens=2), make_req("b", 32)
    s.add_request(a)
    s.add_request(b)
    step(s)
    step(s)  # preempts b; a reaches max_tokens and frees its 3 blocks
    assert a.status == RequestStatus.FINISHED_LENGTH and b.status == RequestStatus.PREEMPTED
    out = step(s, [9])
    # b prefills prompt + its one output again (33 tokens), then samples its second token
    assert plan(out) == [("b", 33)]
    assert b.status == RequestStatus.RUNNING
    assert b.output_token_ids == [TOKEN, 9]
    assert b.num_computed_tokens == 33 and len(s.kv.get_block_ids("b")) == 3


def test_a_step_that_preempts_admits_no_waiting_request() -> None:
    s = make_sched(num_blocks=5, max_model_len=64)
    s.add_request(make_req("a", 32))
    s.add_request(make_req("b", 32))
    step(s)
    s.add_request(make_req("c", 1))  # would fit the 1 free block, but must wait behind b
    out = step(s)  # a takes the free block; b needs one too -> b is preempted
    assert plan(out) == [("a", 1)]
    assert out.num_preempted == 1
    assert [r.request_id for r in s.waiting] == ["b", "c"]


def test_the_newest_request_yields_its_blocks_to_the_oldest() -> None:
    s = make_sched(num_blocks=2, max_model_len=32)
    a, b = make_req("a", 16), make_req("b", 16)
    s.add_request(a)
    s.add_request(b)
    step(s)  # a: 1 block, b: 1 block
    out = step(s)  # a needs a 2nd block: b is preempted and its block goes to a
    assert plan(out) == [("a", 1)] and b.status == RequestStatus.PREEMPTED
    assert len(s.kv.get_block_ids("a")) == 2


def test_a_pool_smaller_than_one_max_length_request_is_refused() -> None:
    """Otherwise a long request would preempt itself forever: a hang, not an error."""
    with pytest.raises(ValueError, match=r"max_model_len=100.*6 blocks"):
        make_sched(num_blocks=6, max_model_len=100)
    make_sched(num_blocks=7, max_model_len=100)  # 7 x 16 = 112 tokens: enough


# ---- abort ----------------------------------------------------------------------------------


def test_abort_frees_blocks_of_running_and_waiting_requests() -> None:
    s = make_sched(budget=40)
    a, b, c = make_req("a", 20), make_req("b", 20), make_req("c", 20)
    for r in (a, b, c):
        s.add_request(r)
    step(s)  # a: 20, b: 20 (budget), c waits
    assert held_blocks(s) == 4
    aborted = s.abort_requests(["a", "c", "nope"])
    assert aborted == [a, c]
    assert a.status == c.status == RequestStatus.FINISHED_ABORTED
    assert a.status.finish_reason == "abort"
    assert held_blocks(s) == 2 and s.kv.get_block_ids("a") == []
    assert list(s.running) == [b] and not s.waiting
    assert s.schedule().finished_req_ids == {"a", "c"}  # the runner drops their state
    assert s.abort_requests(["a"]) == []  # aborting twice is a no-op


def test_abort_while_a_step_runs_drops_its_result() -> None:
    s = make_sched()
    a = make_req("a", 4)
    s.add_request(a)
    out = s.schedule()
    s.abort_requests(["a"])
    assert s.update_from_output(out, [TOKEN]) == []
    assert a.output_token_ids == [] and held_blocks(s) == 0


# ---- finishing ------------------------------------------------------------------------------


def run_until_done(s: Scheduler, req: Request, tokens: Sequence[int]) -> None:
    s.add_request(req)
    for t in tokens:
        step(s, t)
        if req.status.finished:
            return


def test_finish_by_max_tokens() -> None:
    s = make_sched()
    req = make_req("a", 4, max_tokens=3)
    run_until_done(s, req, [TOKEN] * 10)
    assert req.output_token_ids == [TOKEN] * 3
    assert req.status == RequestStatus.FINISHED_LENGTH and req.status.finish_reason == "length"
    assert held_blocks(s) == 0 and not s.has_unfinished_requests()
    assert "a" not in s.requests


def test_finish_by_eos() -> None:
    s = make_sched()
    req = make_req("a", 4, max_tokens=10)
    run_until_done(s, req, [TOKEN, EOS, TOKEN])
    assert req.output_token_ids == [TOKEN, EOS]
    assert req.status == RequestStatus.FINISHED_STOPPED and req.status.finish_reason == "stop"
    assert req.stop_reason is None
    assert held_blocks(s) == 0


def test_ignore_eos_runs_to_max_tokens() -> None:
    s = make_sched()
    req = make_req("a", 4, max_tokens=4, ignore_eos=True)
    run_until_done(s, req, [EOS] * 10)
    assert req.output_token_ids == [EOS] * 4
    assert req.status == RequestStatus.FINISHED_LENGTH


def test_finish_by_stop_token_ids() -> None:
    s = make_sched()
    req = make_req("a", 4, max_tokens=10, stop_token_ids=[5, 6])
    run_until_done(s, req, [TOKEN, 6, TOKEN])
    assert req.output_token_ids == [TOKEN, 6]
    assert req.status == RequestStatus.FINISHED_STOPPED and req.stop_reason == 6


def test_stop_token_ids_apply_with_ignore_eos() -> None:
    s = make_sched()
    req = make_req("a", 4, max_tokens=10, ignore_eos=True, stop_token_ids=[EOS])
    run_until_done(s, req, [TOKEN, EOS])
    assert req.status == RequestStatus.FINISHED_STOPPED and req.stop_reason == EOS


def test_min_tokens_defers_eos_and_stop_tokens() -> None:
    s = make_sched()
    req = make_req("a", 4, max_tokens=10, min_tokens=3, stop_token_ids=[5])
    run_until_done(s, req, [EOS, 5, EOS, TOKEN])
    assert req.output_token_ids == [EOS, 5, EOS]  # stops at the first EOS at/after min_tokens
    assert req.status == RequestStatus.FINISHED_STOPPED


def test_min_tokens_does_not_extend_max_tokens() -> None:
    s = make_sched()
    req = make_req("a", 4, max_tokens=3, min_tokens=3)
    run_until_done(s, req, [TOKEN] * 5)
    assert req.num_output_tokens == 3 and req.status == RequestStatus.FINISHED_LENGTH


def test_finish_by_max_model_len() -> None:
    s = make_sched(max_model_len=12)
    req = make_req("a", 10, max_tokens=None)
    run_until_done(s, req, [TOKEN] * 10)
    assert req.num_tokens == 12 and req.num_output_tokens == 2
    assert req.status == RequestStatus.FINISHED_LENGTH


def test_finished_requests_are_reported_once() -> None:
    s = make_sched()
    s.add_request(make_req("a", 4, max_tokens=1))
    s.add_request(make_req("b", 4, max_tokens=3))
    step(s)  # a finishes
    assert s.schedule().finished_req_ids == {"a"}
    assert s.schedule().finished_req_ids == set()


def test_duplicate_request_id_is_refused() -> None:
    s = make_sched()
    s.add_request(make_req("a", 4))
    with pytest.raises(ValueError, match="request_id='a'"):
        s.add_request(make_req("a", 4))


# ---- fairness between groups (the requests fanned out from one user request) -----------------


def make_group(group: str, num: int, num_prompt: int = 4, **params: object) -> list[Request]:
    return [
        Request(
            f"{i}_{group}",
            list(range(10, 10 + num_prompt)),
            SamplingParams(temperature=0.0, **params),
            frozenset({EOS}),
            group_id=group,
        )
        for i in range(num)
    ]


def test_a_starved_group_gets_a_seat_from_the_biggest_group() -> None:
    s = make_sched(max_num_seqs=4)
    big = make_group("big", 6, max_tokens=100)
    for r in big:
        s.add_request(r)
    assert [rid for rid, _ in plan(step(s))] == ["0_big", "1_big", "2_big", "3_big"]
    s.add_request(make_req("small", 4, max_tokens=2))
    out = step(s)
    # the newest running request of "big" yields its seat; "small" is admitted ahead of the
    # two older waiting requests of "big"
    assert plan(out) == [("0_big", 1), ("1_big", 1), ("2_big", 1), ("small", 4)]
    assert out.num_preempted == 1 and big[3].status == RequestStatus.PREEMPTED
    assert [r.request_id for r in s.waiting] == ["3_big", "4_big", "5_big"]
    out = step(s)  # small finishes (max_tokens=2); big is not starved, so nothing is preempted
    assert out.num_preempted == 0 and "small" not in s.requests
    assert plan(step(s)) == [
        ("0_big", 1),
        ("1_big", 1),
        ("2_big", 1),
        ("3_big", 5),
    ]  # 4 + 1 output: recomputed


def test_a_starved_group_gets_blocks_from_the_biggest_group() -> None:
    s = make_sched(num_blocks=4, max_model_len=64)
    for r in make_group("big", 4, num_prompt=8, max_tokens=100):
        s.add_request(r)
    step(s)  # 4 requests x 1 block: the pool is full (seats are not: max_num_seqs is 256)
    s.add_request(make_req("small", 8, max_tokens=2))
    out = step(s)
    assert plan(out) == [("0_big", 1), ("1_big", 1), ("2_big", 1), ("small", 8)]
    assert out.num_preempted == 1 and s.kv.num_free_blocks == 0


def test_no_seat_is_taken_from_a_group_of_one() -> None:
    s = make_sched(max_num_seqs=2)
    for rid in "abc":
        s.add_request(make_req(rid, 4, max_tokens=100))
    step(s)
    out = step(s)
    assert plan(out) == [("a", 1), ("b", 1)] and out.num_preempted == 0


def test_finish_requests_with_an_error_frees_blocks() -> None:
    s = make_sched()
    a, b = make_req("a", 20), make_req("b", 20)
    s.add_request(a)
    s.add_request(b)
    out = s.schedule()
    assert s.finish_requests(["a"], RequestStatus.FINISHED_ERROR) == [a]
    assert a.status.finish_reason == "error" and s.kv.get_block_ids("a") == []
    results = s.update_from_output(out, [-1, TOKEN])  # a's placeholder result is skipped
    assert [(r.request_id, got) for r, got in results] == [("b", True)]
    assert s.finish_requests(["a"], RequestStatus.FINISHED_ERROR) == []  # once only


# ---- async scheduling: steps committed at launch, tokens back a step later ---------------------


def launch(s: Scheduler) -> tuple[SchedulerOutput, list[bool]]:
    """Schedule a step and commit it, as the engine core does when it launches one."""
    out = s.schedule()
    return out, s.commit_launch(out)


def test_a_committed_step_lets_the_next_decode_be_scheduled_before_its_token() -> None:
    s = make_sched()
    s.add_request(make_req("a", 20, max_tokens=10))
    first, samples = launch(s)
    req = first.requests[0]
    assert samples == [True] and req.num_pending_tokens == 1 and req.num_computed_tokens == 20
    second, samples2 = launch(s)  # the prefill's token is not back yet
    assert plan(second) == [("a", 1)] and samples2 == [True]
    assert req.num_computed_tokens == 21 and req.num_pending_tokens == 2
    s.complete(first, samples, [TOKEN])
    assert req.output_token_ids == [TOKEN] and req.num_pending_tokens == 1
    # the second step's KV slot is allocated: 21 positions
    assert len(s.kv.get_block_ids("a")) == 2


def test_a_partial_prefill_chunk_samples_nothing() -> None:
    s = make_sched(budget=16)
    s.add_request(make_req("a", 40, max_tokens=4))
    out, samples = launch(s)
    assert plan(out) == [("a", 16)] and samples == [False]
    assert out.requests[0].num_pending_tokens == 0
    assert s.complete(out, samples, [TOKEN]) == [(out.requests[0], False)]
    assert out.requests[0].num_tokens == 40


def test_pending_tokens_that_reach_max_tokens_schedule_no_further_step() -> None:
    s = make_sched()
    s.add_request(make_req("a", 8, max_tokens=2, ignore_eos=True))
    first, samples1 = launch(s)  # prefill: token 1 pending
    second, samples2 = launch(s)  # decode: token 2 pending
    assert plan(second) == [("a", 1)]
    third = s.schedule()
    assert third.is_empty()  # 0 outputs + 2 pending = max_tokens
    s.complete(first, samples1, [TOKEN])
    s.complete(second, samples2, [TOKEN])
    req = second.requests[0]
    assert req.status is RequestStatus.FINISHED_LENGTH and req.output_token_ids == [TOKEN] * 2
    assert held_blocks(s) == 0 and s.num_needing_host_tokens == 0


def test_a_stop_token_in_flight_drops_the_next_steps_token() -> None:
    s = make_sched()
    s.add_request(make_req("a", 8, max_tokens=10))
    first, samples1 = launch(s)
    second, samples2 = launch(s)  # launched before the first step's EOS is seen
    assert s.complete(first, samples1, [EOS])[0][0].status is RequestStatus.FINISHED_STOPPED
    assert s.complete(second, samples2, [TOKEN]) == []  # finished: its wasted token is dropped
    assert second.requests[0].output_token_ids == [EOS] and held_blocks(s) == 0


def test_a_request_preempted_with_a_pending_token_waits_for_it() -> None:
    # 2 blocks of 16: a (16 prompt tokens) and b (16) fill the pool; a's first decode needs a
    # third block, so b (the newest) is preempted while its prefill's token is in flight
    s = make_sched(num_blocks=3, max_model_len=32)
    s.add_request(make_req("a", 16, max_tokens=5))
    s.add_request(make_req("b", 16, max_tokens=5))
    first, samples1 = launch(s)
    assert plan(first) == [("a", 16), ("b", 16)]
    second, samples2 = launch(s)  # a's decode takes a block; b's decode finds none
    assert ("a", 1) in plan(second)
    b = first.requests[1]
    assert b.status is RequestStatus.PREEMPTED, plan(second)
    assert b.num_computed_tokens == 0 and b.num_pending_tokens == 1
    s.commit_launch(second)
    s.abort_requests(["a"])  # the pool is free again: only b's pending token holds it back
    assert s.schedule().is_empty()
    s.complete(first, samples1, [TOKEN, TOKEN])
    assert b.num_pending_tokens == 0 and b.output_token_ids == [TOKEN]
    assert plan(s.schedule()) == [("b", 17)]  # now it resumes: prompt and its output


def test_update_from_output_is_commit_then_complete() -> None:
    s = make_sched()
    s.add_request(make_req("a", 5, max_tokens=3))
    out = step(s)
    req = out.requests[0]
    assert req.num_computed_tokens == 5 and req.num_pending_tokens == 0
    assert req.output_token_ids == [TOKEN]


def test_requests_that_need_host_tokens_are_counted_until_they_end() -> None:
    s = make_sched()
    s.add_request(make_req("penalised", 5, max_tokens=1, repetition_penalty=1.2, min_tokens=1))
    s.add_request(make_req("scored", 5, max_tokens=1, prompt_logprobs=1))
    s.add_request(make_req("banned", 5, max_tokens=3, bad_words_token_ids=[[4, 5]]))
    assert s.num_needing_host_tokens == 2  # penalties and min_tokens count pending outputs
    s.abort_requests(["banned"])
    assert s.num_needing_host_tokens == 1
    step(s)
    assert s.num_needing_host_tokens == 0 and not s.has_unfinished_requests()

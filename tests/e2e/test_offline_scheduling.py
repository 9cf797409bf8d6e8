"""Scheduling never changes greedy tokens (nor seeded ones): batching, chunked prefill and
preemption by recompute, with synchronous and with async scheduling (steps launched before the
previous step's tokens are back: a preemption may then find a request's token in flight).

Every constrained run is compared with one unconstrained run of the same tiny Llama (whose
greedy tokens test_offline_hf_parity ties to transformers). The engine core runs in-process so the
tests can look at its scheduler: each asserts that the constraint really bit (chunks smaller than
a prompt, mixed steps, preemptions), or equality would prove nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from vgraph import LLM, SamplingParams
from vgraph.core.scheduler import Scheduler, SchedulerOutput

pytestmark = pytest.mark.usefixtures("single_thread")

SMALL_KV_BYTES = 1 << 24
NEW_TOKENS = 32
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
PROMPT_LENS = (40, 100, 57, 64, 83, 45, 71, 96)  # 8 prompts of 40-100 tokens


def make_llm(folder: Path, **kwargs: Any) -> LLM:
    return LLM(str(folder), multiprocess=False, cpu_kv_cache_bytes=SMALL_KV_BYTES, **kwargs)


def scheduler_of(llm: LLM) -> Scheduler:
    return llm.engine.client.core.scheduler


def token_ids(
    llm: LLM, prompts: list[list[int]], params: SamplingParams = GREEDY
) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]


@pytest.fixture(scope="module")
def folder(tiny_checkpoint) -> Path:
    return tiny_checkpoint("llama")


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def overlap(request) -> bool:
    """async_scheduling of the constrained engine."""
    return request.param


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    gen = torch.Generator().manual_seed(1234)
    return [torch.randint(0, 512, (n,), generator=gen).tolist() for n in PROMPT_LENS]


@pytest.fixture(scope="module")
def reference(folder: Path, prompts: list[list[int]]) -> list[list[int]]:
    """Unconstrained: the whole batch fits the token budget and the KV cache at once."""
    llm = make_llm(folder)
    out = token_ids(llm, prompts)
    assert scheduler_of(llm).num_preemptions == 0
    return out


class StepLog:
    """Records, for every scheduled step, (request id, computed before, scheduled, prompt len)."""

    def __init__(self, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps: list[list[tuple[str, int, int, int]]] = []
        schedule = scheduler.schedule

        def spy() -> SchedulerOutput:
            out = schedule()
            self.steps.append(
                [
                    (r.request_id, r.num_computed_tokens, n, r.num_prompt_tokens)
                    for r, n in zip(out.requests, out.num_scheduled_tokens)
                ]
            )
            return out

        monkeypatch.setattr(scheduler, "schedule", spy)


def test_batch_invariance(
    folder: Path, prompts: list[list[int]], reference: list[list[int]]
) -> None:
    """A prompt alone and inside a batch of 8 gives the same greedy tokens."""
    llm = make_llm(folder)
    target = 3
    alone = token_ids(llm, [prompts[target]])[0]
    assert alone == reference[target]
    # the same prompt at another place in a batch of 8 (others reordered)
    batch = [prompts[i] for i in (5, 0, 7, 3, 1, 2, 6, 4)]
    got = token_ids(llm, batch)
    assert got[3] == alone
    assert got == [reference[i] for i in (5, 0, 7, 3, 1, 2, 6, 4)]


def test_chunked_prefill_matches_unconstrained(
    folder: Path,
    prompts: list[list[int]],
    reference: list[list[int]],
    monkeypatch: pytest.MonkeyPatch,
    overlap: bool,
) -> None:
    llm = make_llm(folder, max_num_batched_tokens=16, async_scheduling=overlap)
    log = StepLog(scheduler_of(llm), monkeypatch)
    assert token_ids(llm, prompts) == reference

    assert all(sum(n for _, _, n, _ in step) <= 16 for step in log.steps)
    chunks = [(c, n, p) for step in log.steps for _, c, n, p in step if c < p]
    assert any(c + n < p for c, n, p in chunks), "no prompt was split into chunks"
    assert any(c > 0 for c, _, p in chunks), "no chunk continued a partly computed prompt"
    mixed = [
        step
        for step in log.steps
        if any(c >= p for _, c, _, p in step) and any(c < p for _, c, _, p in step)
    ]
    assert mixed, "no step mixed decodes with a prefill chunk"


def test_chunked_prefill_keeps_seeded_tokens(
    folder: Path, prompts: list[list[int]], monkeypatch: pytest.MonkeyPatch, overlap: bool
) -> None:
    """A seeded request draws from its generator only for the tokens it keeps: the row of a
    partial prefill chunk, computed and dropped, does not advance it (vLLM rewinds it)."""
    seeded = SamplingParams(temperature=1.0, seed=7, max_tokens=8, ignore_eos=True)
    whole = make_llm(folder, async_scheduling=overlap)
    want = token_ids(whole, prompts, seeded)
    whole.shutdown()
    llm = make_llm(folder, max_num_batched_tokens=16, async_scheduling=overlap)
    log = StepLog(scheduler_of(llm), monkeypatch)
    assert token_ids(llm, prompts, seeded) == want
    assert any(c + n < p for step in log.steps for _, c, n, p in step), "no partial chunk"


@pytest.mark.parametrize("caching", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_preemption_matches_unconstrained(
    folder: Path,
    prompts: list[list[int]],
    reference: list[list[int]],
    monkeypatch: pytest.MonkeyPatch,
    caching: bool,
    overlap: bool,
) -> None:
    # 12 blocks = 192 tokens: the longest request (100 + 32) fits alone, the batch (~780) never
    llm = make_llm(
        folder,
        num_gpu_blocks_override=12,
        max_model_len=192,
        enable_prefix_caching=caching,
        async_scheduling=overlap,
    )
    sched = scheduler_of(llm)
    log = StepLog(sched, monkeypatch)
    assert token_ids(llm, prompts) == reference

    assert sched.num_preemptions > 0
    assert llm.engine.last_stats.num_preemptions == sched.num_preemptions
    # a preempted request was recomputed: a chunk of several tokens ending past its prompt
    # (only a resumed request computes output tokens in a prefill); without the prefix cache
    # from scratch, with it from the first block no longer cached (whole blocks)
    recomputed = [(c, n) for step in log.steps for _, c, n, p in step if n > 1 and c + n > p]
    assert recomputed
    if not caching:
        assert any(c == 0 for c, _ in recomputed)
    assert all(c % 16 == 0 for c, _ in recomputed)
    assert sched.kv.num_free_blocks == 12 and not sched.requests


def test_chunked_prefill_with_preemption_matches_unconstrained(
    folder: Path, prompts: list[list[int]], reference: list[list[int]], overlap: bool
) -> None:
    llm = make_llm(
        folder,
        max_num_batched_tokens=16,
        num_gpu_blocks_override=12,
        max_model_len=192,
        async_scheduling=overlap,
    )
    assert token_ids(llm, prompts) == reference
    assert scheduler_of(llm).num_preemptions > 0


def test_max_num_seqs_matches_unconstrained(
    folder: Path,
    prompts: list[list[int]],
    reference: list[list[int]],
    monkeypatch: pytest.MonkeyPatch,
    overlap: bool,
) -> None:
    llm = make_llm(folder, max_num_seqs=3, async_scheduling=overlap)
    log = StepLog(scheduler_of(llm), monkeypatch)
    assert token_ids(llm, prompts) == reference
    assert max(len(step) for step in log.steps) == 3

"""The runner's input buffers: the decode fast path fills exactly what the general path does."""

from __future__ import annotations

import pytest
import torch

from vgraph.core.scheduler import SchedulerOutput
from vgraph.request import Request
from vgraph.sampling_params import SamplingParams
from vgraph.worker.input_batch import InputBuffers

BLOCK_SIZE = 16


def decode_step(contexts: list[int], same_step_kv: bool = False) -> SchedulerOutput:
    """Requests with the given tokens computed, each scheduling its next token; block ids chosen
    so no two requests share one and the rows differ in length."""
    reqs, block_ids, next_block = [], [], 3
    for i, ctx in enumerate(contexts):
        req = Request(
            f"r{i}", [(7 * i + j) % 1000 for j in range(ctx + 1)], SamplingParams(), frozenset()
        )
        req.num_computed_tokens = ctx
        n = ctx // BLOCK_SIZE + 1 + i % 2  # a spare block on every other request
        block_ids.append(list(range(next_block, next_block + n)))
        next_block += n
        reqs.append(req)
    return SchedulerOutput(
        requests=reqs,
        num_scheduled_tokens=[1] * len(reqs),
        block_ids=block_ids,
        same_step_kv=same_step_kv,
    )


@pytest.mark.parametrize(
    ("contexts", "t_pad", "r_pad", "same_step_kv"),
    [
        ([128], None, None, False),
        ([128], 4, 4, False),  # a FULL replay's padded counts
        ([5, 16, 17, 200, 31], 8, 8, False),
        ([5, 16, 17], 8, None, True),  # a piecewise key pads tokens only
    ],
)
def test_decode_fast_path_matches_the_general_fill(
    contexts: list[int], t_pad: int | None, r_pad: int | None, same_step_kv: bool
) -> None:
    sched = decode_step(contexts, same_step_kv)
    filled = []
    for fill in ("_fill_decode", "_fill_any"):
        bufs = InputBuffers(16, 8, 32, BLOCK_SIZE, torch.device("cpu"))
        bufs.host.fill_(0xAB)  # stale bytes from earlier steps: every used byte is rewritten
        step = getattr(bufs, fill)(sched, t_pad, r_pad)
        filled.append((bufs.host[: step.layout.nbytes].clone(), step))
    (fast, a), (general, b) = filled
    assert torch.equal(fast, general)
    for field in (
        "num_reqs",
        "num_tokens",
        "num_reqs_padded",
        "num_tokens_padded",
        "max_query_len",
        "max_seq_len",
        "uniform_decode",
        "same_step_kv",
    ):
        assert getattr(a, field) == getattr(b, field), field
    ctx = contexts[-1]
    assert a.layout.np.positions[len(contexts) - 1] == ctx
    assert a.layout.np.seq_lens[len(contexts) - 1] == ctx + 1


def test_prepare_takes_the_general_path_for_prefill_chunks() -> None:
    sched = decode_step([40, 9])
    sched.num_scheduled_tokens = [1, 3]  # the second request computes 3 prompt tokens
    sched.requests[1].all_token_ids += [1, 2]
    bufs = InputBuffers(16, 8, 32, BLOCK_SIZE, torch.device("cpu"))
    step = bufs.prepare(sched)
    assert step.num_tokens == 4 and step.max_query_len == 3 and not step.uniform_decode
    assert step.layout.np.positions[:4].tolist() == [40, 9, 10, 11]

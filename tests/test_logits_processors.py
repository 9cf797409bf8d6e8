"""Logits processors against a plain reference on the logits: the three penalties (as vLLM, OpenAI
and Hugging Face define them), logit_bias, allowed_token_ids, bad words, the structured-output
bitmask (against xgrammar's own), and neutral values leaving the logits bit-for-bit alone."""

from __future__ import annotations

import pytest
import torch

from vgraph.request import Request
from vgraph.sample.logits_processors import apply_token_bitmask
from vgraph.sample.sampler import Sampler
from vgraph.sampling_params import SamplingParams
from vgraph.worker.sampling_inputs import build_sampling_metadata

CPU = torch.device("cpu")
VOCAB = 50


def requests(params: list[SamplingParams], outputs: list[list[int]]) -> list[Request]:
    reqs = []
    for i, (p, out) in enumerate(zip(params, outputs)):
        req = Request(str(i), [3, 4, 4, 7], p, frozenset())
        for t in out:
            req.append_output_token(t)
        reqs.append(req)
    return reqs


def processed(logits: torch.Tensor, reqs: list[Request], **kw: object) -> torch.Tensor:
    md = build_sampling_metadata(reqs, {}, CPU, **kw)
    return Sampler.process(logits.clone(), md)


def reference_penalties(logits: torch.Tensor, reqs: list[Request]) -> torch.Tensor:
    """Row by row, token by token, from the definitions."""
    out = logits.clone()
    for row, req in enumerate(reqs):
        p = req.sampling_params
        outputs = req.output_token_ids
        for tok in range(VOCAB):
            x = out[row, tok].item()
            if tok in outputs or tok in req.prompt_token_ids:
                x = x / p.repetition_penalty if x > 0 else x * p.repetition_penalty
            count = outputs.count(tok)
            x -= p.frequency_penalty * count + p.presence_penalty * (count > 0)
            out[row, tok] = x
    return out


def test_penalties_equal_the_reference() -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, VOCAB) * 3
    params = [
        SamplingParams(presence_penalty=1.5),
        SamplingParams(frequency_penalty=-0.7),
        SamplingParams(repetition_penalty=1.8),
        SamplingParams(presence_penalty=0.3, frequency_penalty=0.4, repetition_penalty=0.6),
    ]
    reqs = requests(params, [[1, 1, 9], [2, 2, 2, 5], [4, 11, 0], [7, 7, 12, 13]])
    got = processed(logits, reqs)
    assert torch.allclose(got, reference_penalties(logits, reqs), atol=1e-5)
    assert not torch.allclose(got, logits)  # every row changed somewhere


def test_rows_without_penalties_are_untouched_in_a_penalised_batch() -> None:
    logits = torch.randn(2, VOCAB)
    reqs = requests([SamplingParams(), SamplingParams(frequency_penalty=1.0)], [[1, 2], [1, 2]])
    got = processed(logits, reqs)
    assert torch.equal(got[0], logits[0]) and not torch.equal(got[1], logits[1])


def test_neutral_values_leave_the_logits_alone() -> None:
    logits = torch.randn(3, VOCAB)
    neutral = SamplingParams(
        temperature=0.0,
        presence_penalty=0.0,
        frequency_penalty=0.0,
        repetition_penalty=1.0,
        logit_bias={},
    )
    reqs = requests([neutral] * 3, [[1], [2, 3], []])
    md = build_sampling_metadata(reqs, {}, CPU)
    assert md.processors is None
    assert torch.equal(Sampler()(logits, md).token_ids, logits.argmax(-1))


def test_logit_bias_adds_and_forces() -> None:
    logits = torch.randn(2, VOCAB)
    reqs = requests([SamplingParams(logit_bias={5: 100.0, 6: -3.5}), SamplingParams()], [[], []])
    got = processed(logits, reqs)
    assert torch.allclose(got[0, 5], logits[0, 5] + 100) and torch.allclose(
        got[0, 6], logits[0, 6] - 3.5
    )
    assert torch.equal(got[1], logits[1])
    md = build_sampling_metadata(reqs, {}, CPU)
    assert Sampler()(logits, md).token_ids[0].item() == 5


def test_allowed_token_ids_keep_only_those() -> None:
    logits = torch.randn(2, VOCAB)
    reqs = requests([SamplingParams(allowed_token_ids=[3, 17]), SamplingParams()], [[], []])
    got = processed(logits, reqs)
    finite = torch.isfinite(got[0]).nonzero().flatten().tolist()
    assert finite == [3, 17] and torch.equal(got[1], logits[1])


def test_bad_words_ban_the_last_token_after_the_prefix() -> None:
    logits = torch.randn(3, VOCAB)
    p = SamplingParams(bad_words_token_ids=[[9], [20, 21, 22]])
    reqs = requests([p, p, p], [[1], [20, 21], [20, 5]])
    got = processed(logits, reqs)
    assert torch.isinf(got[:, 9]).all()  # a one-token word: always
    assert torch.isinf(got[1, 22]) and torch.isfinite(got[0, 22]) and torch.isfinite(got[2, 22])


@pytest.mark.parametrize("vocab", [50, 64, 97])
def test_bitmask_matches_xgrammar(vocab: int) -> None:
    xgr = pytest.importorskip("xgrammar")
    torch.manual_seed(vocab)
    logits = torch.randn(3, vocab)
    bitmask = xgr.allocate_token_bitmask(3, vocab)
    bitmask[0] = torch.randint(-(2**31), 2**31 - 1, bitmask[0].shape, dtype=torch.int32)
    bitmask[1, 0] = 0b1011  # tokens 0, 1, 3 only
    bitmask[1, 1:] = 0
    want = logits.clone()
    xgr.apply_token_bitmask_inplace(want, bitmask)
    assert torch.equal(apply_token_bitmask(logits, bitmask), want)
    assert torch.equal(apply_token_bitmask(logits, bitmask)[2], logits[2])  # all ones: untouched


def test_penalty_tokens_kept_across_steps_follow_new_outputs() -> None:
    """The runner's PenaltyTokens converts only new outputs each step: after more tokens, the
    processed logits equal a fresh build's and the reference's."""
    from vgraph.worker.sampling_inputs import PenaltyTokens

    torch.manual_seed(1)
    logits = torch.randn(2, VOCAB) * 3
    params = [SamplingParams(repetition_penalty=1.5), SamplingParams(frequency_penalty=0.9)]
    reqs = requests(params, [[1, 2], [3]])
    cache = PenaltyTokens()
    processed(logits, reqs, penalty_tokens=cache)
    for step in range(70):  # past the first buffer's size, so the buffers grow
        reqs[0].append_output_token(5 + step % 40)
        reqs[1].append_output_token(9)
        got = processed(logits, reqs, penalty_tokens=cache)
    assert torch.equal(got, processed(logits, reqs))
    assert torch.allclose(got, reference_penalties(logits, reqs), atol=1e-5)
    cache.forget("0")
    assert torch.equal(processed(logits, reqs, penalty_tokens=cache), got)


def test_a_pending_output_counts_as_if_it_were_on_the_host() -> None:
    """Async scheduling: a request whose last output is still on the device (pending, in the
    last step's sampled ids) gets the same processed logits as when that output is on the host:
    penalties count it (its entry is filled on the device), min_tokens counts it (EOS is allowed
    from the right token on), and bias and allowed lists are unchanged."""
    from vgraph.worker.token_feed import DeviceTokenFeed

    torch.manual_seed(2)
    logits = torch.randn(6, VOCAB) * 3
    eos = 9
    params = [
        SamplingParams(repetition_penalty=1.5),  # the prompt counts too
        SamplingParams(frequency_penalty=0.9, presence_penalty=0.4),
        SamplingParams(min_tokens=3),  # 2 outputs + the pending one: EOS allowed
        SamplingParams(min_tokens=4),  # banned still
        SamplingParams(logit_bias={5: 2.0}, allowed_token_ids=[5, 6, 11]),
        SamplingParams(frequency_penalty=0.7),  # its output is on the host: nothing pending
    ]
    outputs = [[11, 12], [11, 11], [1, 2], [1, 2], [6, 6], [8, 8]]
    pending = [11, 12, 13, 14, 15, None]  # the last output of each row, still on the device
    on_host, async_view = [], []
    for i, (p, out, tok) in enumerate(zip(params, outputs, pending)):
        full = out + ([] if tok is None else [tok])
        on_host.append(Request(str(i), [3, 4, 4, 7], p, frozenset({eos})))
        async_view.append(Request(str(i), [3, 4, 4, 7], p, frozenset({eos})))
        for t in full:
            on_host[-1].append_output_token(t)
        for t in out:
            async_view[-1].append_output_token(t)
        async_view[-1].num_pending_tokens = int(tok is not None)
    feed = DeviceTokenFeed(8, CPU)
    last_step = [Request(f"x{i}", [1], SamplingParams(), frozenset()) for i in range(2)]
    rows = last_step + async_view  # this step's requests sat at rows 2.. of the last one
    feed.remember(rows, torch.tensor([0, 0] + [t or 0 for t in pending]))
    want = processed(logits, on_host)
    got = processed(logits, async_view, feed=feed)
    assert torch.equal(got, want)
    assert torch.isfinite(got[2, eos]) and torch.isinf(got[3, eos])
    other = DeviceTokenFeed(8, CPU)  # other ids in the last step's rows: other logits
    other.remember(rows, torch.zeros(8, dtype=torch.int64))
    assert not torch.equal(got, processed(logits, async_view, feed=other))

"""The logits processors in one pass (vgraph_C::apply_logits_processors on CUDA, the torch path
elsewhere) against a row-by-row reference from the definitions: every kind of entry at once
(penalties, logit_bias, allowed lists, min_tokens and bad-word bans, a grammar bitmask), neutral
rows in the same batch, the vocabularies of the shipped configs and an odd one, strided logits.
CPU always, CUDA under the `gpu` marker."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.devices import cuda_param
from vgraph.request import Request
from vgraph.sample.logits_processors import (
    apply_processors,
    apply_processors_torch,
    bitmask_allowed,
)
from vgraph.sampling_params import SamplingParams
from vgraph.worker.sampling_inputs import build_sampling_metadata

CUDA = cuda_param("apply_logits_processors")
EOS = 2


def batch(vocab: int, seed: int) -> list[Request]:
    """Eight requests: each processor alone, all together, and neutral rows between them."""
    gen = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(0, vocab, (n,), generator=gen).tolist()

    bias = {t: float(b) for t, b in zip(ids(6), [5.0, -3.0, 0.5, 100.0, -100.0, 2.0])}
    params = [
        SamplingParams(),
        SamplingParams(presence_penalty=0.7, frequency_penalty=0.3),
        SamplingParams(repetition_penalty=1.3),
        SamplingParams(logit_bias=bias),
        SamplingParams(allowed_token_ids=sorted(set(ids(40)))),
        SamplingParams(
            min_tokens=500, max_tokens=1000, bad_words_token_ids=[ids(1), ids(2), ids(3)]
        ),
        SamplingParams(),
        SamplingParams(
            presence_penalty=-0.4,
            frequency_penalty=0.6,
            repetition_penalty=0.8,
            logit_bias=bias,
            allowed_token_ids=sorted(set(ids(300))),
            min_tokens=500,
            max_tokens=1000,
            bad_words_token_ids=[ids(2)],
        ),
    ]
    reqs = []
    for i, p in enumerate(params):
        req = Request(str(i), ids(37 + 11 * i), p, frozenset({EOS}))
        for t in ids(5 + 29 * i):
            req.append_output_token(t)
        reqs.append(req)
    # a bad word whose prefix the output ends with: its last token is banned this step
    word = reqs[5].sampling_params.bad_words_token_ids[1]
    reqs[5].append_output_token(word[0])
    return reqs


def reference(logits: torch.Tensor, reqs: list[Request], bitmask: torch.Tensor) -> torch.Tensor:
    """Row by row from the definitions (sample/logits_processors.py's docstring)."""
    vocab = logits.shape[1]
    out = logits.double().clone()
    allowed_bits = bitmask_allowed(bitmask, vocab)
    for row, req in enumerate(reqs):
        p = req.sampling_params
        x = out[row]
        banned = set()
        if req.num_output_tokens < p.min_tokens:
            banned.add(EOS)
        for word in p.bad_words_token_ids or []:
            if len(word) == 1 or req.output_token_ids[-(len(word) - 1) :] == word[:-1]:
                banned.add(word[-1])
        x[list(banned)] = float("-inf")
        x[~allowed_bits[row]] = float("-inf")
        if p.allowed_token_ids:
            keep = torch.zeros(vocab, dtype=torch.bool, device=x.device)
            keep[p.allowed_token_ids] = True
            x[~keep] = float("-inf")
        for t, b in (p.logit_bias or {}).items():
            x[t] += b
        counts = torch.bincount(torch.tensor(req.output_token_ids), minlength=vocab).to(x.device)
        seen = counts > 0
        if p.repetition_penalty != 1.0:
            seen[req.prompt_token_ids] = True
        r = p.repetition_penalty
        x[seen] = torch.where(x[seen] > 0, x[seen] / r, x[seen] * r)
        x -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)
    return out.float()


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("vocab", [97, 49152, 128256, 151936])
def test_one_pass_equals_the_reference(device: str, vocab: int) -> None:
    reqs = batch(vocab, seed=vocab)
    torch.manual_seed(vocab)
    # strided rows, as the logits of a padded graph replay are a slice of a wider buffer
    logits = (torch.randn(len(reqs), vocab + 64) * 4)[:, :vocab].to(device)
    words = (vocab + 31) // 32
    bitmask = torch.full((len(reqs), words), -1, dtype=torch.int32)
    bitmask[6:] = torch.randint(-(2**31), 2**31 - 1, (2, words), dtype=torch.int32)
    bitmask = bitmask.to(device)
    md = build_sampling_metadata(reqs, {}, torch.device(device), bitmask)
    assert md.processors is not None
    got = apply_processors(logits, md.processors)
    want = reference(logits, reqs, bitmask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    assert torch.equal(got[0], logits[0])  # a neutral row is left as it was
    if device == "cuda":  # the kernel against the torch path on the same device
        torch.testing.assert_close(got, apply_processors_torch(logits, md.processors))


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_bitmask_alone_and_no_processors(device: str) -> None:
    reqs = [Request(str(i), [1, 2, 3], SamplingParams(), frozenset({EOS})) for i in range(3)]
    logits = torch.randn(3, 100, device=device)
    assert build_sampling_metadata(reqs, {}, torch.device(device)).processors is None
    bitmask = torch.full((3, 4), -1, dtype=torch.int32, device=device)
    bitmask[1] = 0
    bitmask[1, 0] = 0b101  # tokens 0 and 2 only
    md = build_sampling_metadata(reqs, {}, torch.device(device), bitmask)
    assert md.processors is not None
    got = apply_processors(logits, md.processors)
    assert torch.isfinite(got[1]).nonzero().flatten().tolist() == [0, 2]
    assert torch.equal(got[[0, 2]], logits[[0, 2]])


@pytest.mark.parametrize("device", [CUDA])
def test_kernel_takes_float32_logits_only(device: str) -> None:
    """The model's head may write 16-bit logits; the sampler widens them before the processors,
    and the kernel refuses any other dtype rather than misread them."""
    reqs = batch(1000, seed=1)
    md = build_sampling_metadata(reqs, {}, torch.device(device))
    assert md.processors is not None
    logits = torch.randn(len(reqs), 1000, device=device, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"logits must be float32 \[num_rows, vocab\]"):
        torch.ops.vgraph_C.apply_logits_processors(
            torch.empty(logits.shape, device=device),
            logits,
            None,
            md.processors.row_ptr,
            md.processors.codes,
            md.processors.values,
            md.processors.params,
        )

"""The sampler's FlashInfer fast path on CUDA: the same distribution as the sort-based path, never
a token outside the top-k/top-p support, and seeded or min_p steps kept on the sort-based path.

Skipped without CUDA or without the flashinfer package.
"""

from __future__ import annotations

import pytest
import torch

from vgraph.sample import flashinfer_sampling
from vgraph.sample.sampler import SamplingMetadata, apply_top_k_top_p, exponential_race

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(
        flashinfer_sampling._flashinfer_sampling() is None, reason="needs flashinfer"
    ),
]

ROWS, VOCAB = 20000, 64


def metadata(top_k: int, top_p: float, **kw) -> SamplingMetadata:
    fields = dict(
        temperature=torch.ones(ROWS, device="cuda"),
        top_k=torch.full((ROWS,), top_k, dtype=torch.int64, device="cuda"),
        top_p=torch.full((ROWS,), top_p, device="cuda"),
        min_p=torch.zeros(ROWS, device="cuda"),
        generators={},
        all_greedy=False,
        need_top_k=top_k < VOCAB,
        need_top_p=top_p < 1.0,
        need_min_p=False,
        max_num_logprobs=None,
    )
    fields.update(kw)
    return SamplingMetadata(**fields)


@pytest.mark.parametrize("top_k,top_p", [(5, 1.0), (VOCAB, 0.8), (10, 0.7)])
def test_fast_path_draws_the_sort_based_distribution(top_k, top_p):
    torch.manual_seed(0)
    row = torch.randn(VOCAB, device="cuda") * 2
    logits = row.expand(ROWS, VOCAB).contiguous()  # one distribution, ROWS draws
    md = metadata(top_k, top_p)
    assert flashinfer_sampling.fast_path_applies(logits, md)
    fast = flashinfer_sampling.sample_top_k_top_p(logits, md)
    truncated = apply_top_k_top_p(
        logits, md.top_k if md.need_top_k else None, md.top_p if md.need_top_p else None
    )
    ours = exponential_race(truncated.softmax(dim=-1), {})
    support = torch.isfinite(truncated[0])
    assert support[fast].all(), "a token outside the top-k/top-p support"
    p_fast = torch.bincount(fast, minlength=VOCAB).float() / ROWS
    p_ours = torch.bincount(ours, minlength=VOCAB).float() / ROWS
    assert 0.5 * (p_fast - p_ours).abs().sum().item() < 0.03  # total variation


def test_seeded_and_min_p_steps_keep_the_sort_based_path():
    logits = torch.randn(4, VOCAB, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(1)
    assert not flashinfer_sampling.fast_path_applies(logits, metadata(5, 1.0, generators={0: gen}))
    assert not flashinfer_sampling.fast_path_applies(logits, metadata(5, 1.0, need_min_p=True))
    assert not flashinfer_sampling.fast_path_applies(logits.cpu(), metadata(5, 1.0))

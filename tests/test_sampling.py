"""The sampler on device tensors: greedy, temperature, top-k, top-p, min-p, per-request seeds and
logprobs. Metadata is built the way the model runner builds it, from (fake) scheduled requests."""

from __future__ import annotations

import pytest
import torch

from vgraph.request import Request
from vgraph.sample.sampler import Sampler, SamplerOutput
from vgraph.sampling_params import SamplingParams
from vgraph.worker.sampling_inputs import build_sampling_metadata

CPU = torch.device("cpu")
VOCAB = 64


def sample(
    logits: torch.Tensor,  # [R, V]
    params: list[SamplingParams],
    generators: dict[str, torch.Generator] | None = None,
    ids: list[str] | None = None,
    greedy: torch.Tensor | None = None,
) -> SamplerOutput:
    """One sampler call for requests with these params (ids name them for their generators)."""
    ids = ids or [str(i) for i in range(len(params))]
    reqs = [Request(rid, [1], p, frozenset()) for rid, p in zip(ids, params)]
    md = build_sampling_metadata(reqs, {} if generators is None else generators, CPU)
    return Sampler()(logits, md, greedy)


def random_logits(rows: int, seed: int = 0, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * scale


def frequencies(tokens: torch.Tensor, vocab: int = VOCAB) -> torch.Tensor:
    return torch.bincount(tokens, minlength=vocab).double() / tokens.numel()


# ---- greedy and its equivalents ------------------------------------------------------------


def test_greedy_is_argmax() -> None:
    logits = random_logits(16)
    out = sample(logits, [SamplingParams(temperature=0.0)] * 16)
    assert torch.equal(out.token_ids, logits.argmax(dim=-1))
    assert out.logprobs is None and out.logprob_token_ids is None


def test_greedy_tokens_from_the_head_are_used_unless_processors_change_the_logits() -> None:
    """The LM head's greedy tokens (a FULL graph's argmax) are the greedy rows' tokens as they
    are (the sampler launches no argmax of its own); a logits processor (here logit_bias)
    changes the logits, and then the sampler takes the argmax of the processed logits."""
    logits = random_logits(4)
    head = torch.tensor([5, 6, 7, 8])  # not the argmax: shows which one was taken
    out = sample(logits, [SamplingParams(temperature=0.0)] * 4, greedy=head)
    assert out.token_ids is head
    mixed = [SamplingParams(temperature=0.0 if i % 2 else 1.0) for i in range(4)]
    assert torch.equal(sample(logits, mixed, greedy=head).token_ids[1::2], head[1::2])
    biased = [SamplingParams(temperature=0.0, logit_bias={3: 100.0})] * 4
    assert torch.equal(sample(logits, biased, greedy=head).token_ids, torch.full((4,), 3))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_logits_in_the_model_dtype_sample_as_their_float32_widening(dtype: torch.dtype) -> None:
    """The fused LM head writes the logits in the model's dtype; the sampler widens them for
    logprobs and processors and samples from their float32 quotient by the temperature, so every
    result equals that of the same values in float32; greedy rows need no float32."""
    low = random_logits(8, seed=4).to(dtype)
    wide = low.float()
    head = wide.argmax(dim=-1)
    greedy = [SamplingParams(temperature=0.0)] * 8
    assert sample(low, greedy, greedy=head).token_ids is head
    assert torch.equal(sample(low, greedy).token_ids, head)
    plain = [SamplingParams(temperature=0.7, top_k=30, top_p=0.9, seed=i) for i in range(8)]
    ids = [f"r{i}" for i in range(8)]
    assert torch.equal(
        sample(low, plain, {}, ids).token_ids, sample(wide, plain, {}, ids).token_ids
    )
    params = [
        SamplingParams(temperature=0.0 if i % 3 == 0 else 0.9, top_k=20, top_p=0.9, seed=i)
        for i in range(4)
    ] + [SamplingParams(temperature=1.0, logprobs=3, logit_bias={5: 2.5}, seed=i) for i in range(4)]
    a = sample(low, params, {}, ids, greedy=head)
    b = sample(wide, params, {}, ids, greedy=head)
    assert torch.equal(a.token_ids, b.token_ids)
    assert a.logprobs.dtype == torch.float32
    assert torch.equal(a.logprobs, b.logprobs)
    assert torch.equal(a.logprob_token_ids, b.logprob_token_ids) and torch.equal(a.ranks, b.ranks)


def test_greedy_rows_stay_argmax_in_a_mixed_batch() -> None:
    torch.manual_seed(0)
    logits = random_logits(8, scale=0.5)  # flat: sampled rows rarely hit the argmax
    params = [SamplingParams(temperature=0.0 if i % 2 else 1.0) for i in range(8)]
    for _ in range(5):
        out = sample(logits, params)
        assert torch.equal(out.token_ids[1::2], logits.argmax(dim=-1)[1::2])


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, top_k=1),
        SamplingParams(temperature=5.0, top_k=1),
        SamplingParams(temperature=1.0, top_p=1e-6),
        SamplingParams(temperature=5.0, top_p=1e-6),
        SamplingParams(temperature=1.0, min_p=1.0),
        SamplingParams(temperature=1e-6),  # the closest top-2 gap here is 3.6e-4
    ],
    ids=["top_k=1", "top_k=1,T=5", "top_p=1e-6", "top_p=1e-6,T=5", "min_p=1", "T=1e-6"],
)
def test_degenerate_sampling_equals_greedy(params: SamplingParams) -> None:
    torch.manual_seed(0)
    logits = random_logits(256, seed=1)
    out = sample(logits, [params] * 256)
    assert torch.equal(out.token_ids, logits.argmax(dim=-1))


@pytest.mark.parametrize("temperature", [1e-39, 1e-30, 1e-10, 9.9e-6])
def test_temperature_below_epsilon_is_greedy(temperature: float) -> None:
    """Divided by such a temperature the logits overflow float32; below SAMPLING_EPS = 1e-5 the
    row is greedy (as vLLM), with or without a seed, alone or beside sampled rows."""
    logits = random_logits(8, seed=2)
    params = [SamplingParams(temperature=temperature, seed=i if i % 2 else None) for i in range(8)]
    assert torch.equal(sample(logits, params).token_ids, logits.argmax(dim=-1))
    mixed = sample(logits, [*params[:4], *[SamplingParams(temperature=1.0)] * 4]).token_ids
    assert torch.equal(mixed[:4], logits.argmax(dim=-1)[:4])


def test_huge_top_k_is_no_cut() -> None:
    logits = random_logits(4, seed=3)
    out = sample(logits, [SamplingParams(temperature=1e-4, top_k=2**63 - 1)] * 4)
    assert torch.equal(out.token_ids, logits.argmax(dim=-1))


# ---- truncation and temperature: which tokens, and how often ---------------------------------

PROBS = torch.tensor([0.05, 0.5, 0.15, 0.3])  # token 1 most likely, then 3, 2, 0


def sample_many(params: SamplingParams, rows: int = 4000, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    logits = PROBS.log().expand(rows, -1).contiguous()
    return sample(logits, [params] * rows).token_ids


def test_top_k_keeps_the_k_most_likely() -> None:
    freq = frequencies(sample_many(SamplingParams(top_k=2)), 4)
    assert freq[0] == 0 and freq[2] == 0
    assert freq[1] == pytest.approx(0.5 / 0.8, abs=0.03)
    assert freq[3] == pytest.approx(0.3 / 0.8, abs=0.03)


def test_top_p_keeps_the_nucleus() -> None:
    # sorted: 0.5, 0.3 | 0.15, 0.05: 0.5 + 0.3 = 0.8 covers top_p=0.75, the rest is cut
    freq = frequencies(sample_many(SamplingParams(top_p=0.75)), 4)
    assert freq[0] == 0 and freq[2] == 0
    assert freq[1] == pytest.approx(0.5 / 0.8, abs=0.03)


def test_top_p_one_keeps_everything() -> None:
    freq = frequencies(sample_many(SamplingParams(top_p=1.0)), 4)
    assert torch.allclose(freq, PROBS.double(), atol=0.03)


def test_min_p_drops_tokens_below_a_fraction_of_the_top() -> None:
    # min_p=0.5: keep p >= 0.25 (half of the top 0.5): tokens 1 and 3
    freq = frequencies(sample_many(SamplingParams(min_p=0.5)), 4)
    assert freq[0] == 0 and freq[2] == 0
    assert freq[3] == pytest.approx(0.3 / 0.8, abs=0.03)
    # min_p=0.2: keep p >= 0.1: token 0 (0.05) alone is dropped
    freq = frequencies(sample_many(SamplingParams(min_p=0.2)), 4)
    assert freq[0] == 0 and freq[2] == pytest.approx(0.15 / 0.95, abs=0.03)


def test_top_k_and_top_p_combine() -> None:
    # top_k=3 keeps {1, 3, 2}; renormalized 0.5/0.95, 0.3/0.95, ...: top_p=0.6 keeps {1, 3}
    freq = frequencies(sample_many(SamplingParams(top_k=3, top_p=0.6)), 4)
    assert freq[0] == 0 and freq[2] == 0 and freq[1] > 0 and freq[3] > 0


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_scales_the_distribution(temperature: float) -> None:
    freq = frequencies(sample_many(SamplingParams(temperature=temperature), rows=6000), 4)
    expected = torch.softmax(PROBS.log() / temperature, dim=-1).double()
    assert torch.allclose(freq, expected, atol=0.025), (freq, expected)


def test_per_row_params_apply_to_their_row_only() -> None:
    torch.manual_seed(0)
    rows = 2000
    logits = PROBS.log().expand(2 * rows, -1).contiguous()
    params = [SamplingParams(top_k=1)] * rows + [SamplingParams()] * rows
    tokens = sample(logits, params).token_ids
    assert (tokens[:rows] == 1).all()
    assert frequencies(tokens[rows:], 4)[0] > 0.02  # the unrestricted rows reach token 0


# ---- per-request seeds -----------------------------------------------------------------------


def run_steps(batch: list[tuple[str, SamplingParams]], target: str, steps: int = 6) -> list[int]:
    """Sample `steps` tokens for the batch (same logits each step); the target's tokens."""
    generators: dict[str, torch.Generator] = {}
    row = [rid for rid, _ in batch].index(target)
    logits = random_logits(len(batch), seed=5, scale=0.3)  # nearly flat: seeds decide
    logits[:] = logits[0]  # every row sees the same distribution
    got = []
    for _ in range(steps):
        out = sample(logits, [p for _, p in batch], generators, [rid for rid, _ in batch])
        got.append(int(out.token_ids[row]))
    return got


def test_same_seed_same_tokens_in_any_batch() -> None:
    seeded = SamplingParams(temperature=1.0, seed=1234)
    alone = run_steps([("x", seeded)], "x")
    torch.manual_seed(99)  # the global RNG (unseeded rows) must not matter
    crowded = run_steps(
        [
            ("a", SamplingParams(temperature=0.8)),
            ("b", SamplingParams(temperature=0.0)),
            ("x", seeded),
            ("c", SamplingParams(temperature=1.0, seed=7)),
        ],
        "x",
    )
    assert alone == crowded
    assert len(set(alone)) > 1  # it really samples: the generator advances between steps


def test_different_seeds_give_different_tokens() -> None:
    a = run_steps([("x", SamplingParams(temperature=1.0, seed=1))], "x")
    b = run_steps([("x", SamplingParams(temperature=1.0, seed=2))], "x")
    assert a != b


# ---- logprobs ---------------------------------------------------------------------------------


def test_logprobs_of_sampled_and_top_n_tokens() -> None:
    torch.manual_seed(0)
    logits = random_logits(32, seed=3)
    params = [SamplingParams(temperature=2.0, logprobs=5)] * 16 + [
        SamplingParams(temperature=0.0, logprobs=3)
    ] * 16
    out = sample(logits, params)
    ref = torch.log_softmax(logits, dim=-1)
    assert out.logprob_token_ids.shape == out.logprobs.shape == (32, 6)  # sampled + max n
    # column 0: the sampled token and its logprob under the raw (untempered) distribution
    assert torch.equal(out.logprob_token_ids[:, 0], out.token_ids)
    torch.testing.assert_close(out.logprobs[:, 0], ref.gather(1, out.token_ids[:, None])[:, 0])
    # columns 1..n: the n most likely tokens, best first, with their logprobs
    top_lp, top_ids = ref.topk(5, dim=-1)
    assert torch.equal(out.logprob_token_ids[:, 1:], top_ids)
    torch.testing.assert_close(out.logprobs[:, 1:], top_lp)
    # rank: 1 + the number of tokens more likely than the sampled one
    order = ref.argsort(dim=-1, descending=True)
    expected_rank = (order == out.token_ids[:, None]).float().argmax(dim=-1) + 1
    assert torch.equal(out.ranks, expected_rank)
    assert (out.ranks[16:] == 1).all()  # greedy rows sample the rank-1 token
    assert (out.ranks[:16] > 1).any()  # T=2 sampling leaves the argmax sometimes


def test_logprobs_zero_returns_only_the_sampled_token() -> None:
    logits = random_logits(4)
    out = sample(logits, [SamplingParams(temperature=0.0, logprobs=0)] * 4)
    assert out.logprobs.shape == (4, 1)
    torch.testing.assert_close(out.logprobs[:, 0], torch.log_softmax(logits, -1).max(dim=-1).values)


def test_no_logprobs_requested_computes_none() -> None:
    out = sample(random_logits(4), [SamplingParams(temperature=1.0, seed=0)] * 4)
    assert out.logprobs is None and out.ranks is None

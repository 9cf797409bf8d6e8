"""Prefix caching and cascade attention end to end on a tiny model (CPU, in-process engine):
greedy outputs equal with caching on and off over a multi-turn conversation and a batch sharing
a long system prompt; cascade steps run PIECEWISE under FULL_AND_PIECEWISE and NONE under
FULL_DECODE_ONLY, the counters say so, and their tokens equal plain attention's."""

from __future__ import annotations

import random

import pytest

import vgraph.attention.torch_backend as torch_backend
from vgraph import LLM, SamplingParams
from vgraph._ext import load_ext
from vgraph.attention.cascade import CascadeCostRule

SIZES = [8]  # the 5-request decode steps pad to it; one graph per mode keeps this fast
rng = random.Random(3)
SYSTEM = [rng.randrange(512) for _ in range(70)]  # 4 full blocks and a bit
TAILS = [[rng.randrange(512) for _ in range(n)] for n in (3, 9, 1, 14, 6)]
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny_llama(tiny_checkpoint):
    return str(tiny_checkpoint("llama"))


def make_llm(model: str, mode: str = "NONE", **kw: object) -> LLM:
    comp = {"cudagraph_mode": mode, "cudagraph_capture_sizes": SIZES}
    return LLM(model, max_model_len=256, multiprocess=False, compilation_config=comp, **kw)


def conversation(llm: LLM) -> tuple[list[list[int]], list[int | None]]:
    """Three turns, each prompt = the previous prompt + its answer + a new user turn."""
    prompt, answers, cached = list(SYSTEM), [], []
    for tail in TAILS[:3]:
        prompt = prompt + tail
        out = llm.generate([prompt], GREEDY, use_tqdm=False)[0]
        answers.append(out.outputs[0].token_ids)
        cached.append(out.num_cached_tokens)
        prompt = prompt + answers[-1]
    return answers, cached


@pytest.fixture(scope="module")
def no_caching(tiny_llama):
    llm = make_llm(tiny_llama, enable_prefix_caching=False)
    yield conversation(llm), llm.generate([SYSTEM + t for t in TAILS], GREEDY, use_tqdm=False)
    llm.shutdown()


def test_greedy_outputs_equal_with_prefix_caching_on_and_off(tiny_llama, no_caching):
    (ref_answers, ref_cached), ref_batch = no_caching
    assert ref_cached == [0, 0, 0]
    llm = make_llm(tiny_llama)  # enable_prefix_caching defaults on
    answers, cached = conversation(llm)
    assert answers == ref_answers
    # turn 2 and 3 hit the previous turns' whole blocks: at least the system prompt's 4
    assert cached[0] == 0 and cached[1] >= 64 and cached[2] > cached[1]
    assert all(c % 16 == 0 for c in cached)
    batch = llm.generate([SYSTEM + t for t in TAILS], GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in batch] == [o.outputs[0].token_ids for o in ref_batch]
    assert all(o.num_cached_tokens >= 64 for o in batch)  # the system prompt, cached by turn 1
    core = llm.engine.client.core
    kv = core.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks  # every block back once all requests ended
    stats = core.stats()
    assert stats.prefix_cache_hits == kv.prefix_cache_hits > 0
    assert stats.prefix_cache_queries > stats.prefix_cache_hits
    llm.shutdown()


BACKENDS = ["torch", pytest.param("csrc", marks=pytest.mark.skipif(not load_ext(), reason="no _C"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "mode, cascade_mode", [("FULL_AND_PIECEWISE", "PIECEWISE"), ("FULL_DECODE_ONLY", "NONE")]
)
def test_cascade_steps_leave_full_graphs(tiny_llama, no_caching, backend, mode, cascade_mode):
    _, ref_batch = no_caching
    llm = make_llm(tiny_llama, mode, attention_backend=backend, enable_cascade_attention=True)
    runner = llm.engine.client.core.runner
    assert runner.cascade_rule is not None
    runner.cascade_rule = CascadeCostRule(min_prefix_tokens=32, min_num_reqs=4)
    before = runner.graph_stats.snapshot()
    outs = llm.generate([SYSTEM + t for t in TAILS], GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in ref_batch]
    g = runner.graph_stats
    # 5 requests of equal length decode together: 7 decode steps, all sharing 4 blocks
    cascade_steps = g.eager_fallbacks["cascade"] - before.eager_fallbacks["cascade"]
    assert cascade_steps == 7
    assert g.steps["FULL"] == before.steps["FULL"]  # FULL never ran a cascade step
    assert g.steps[cascade_mode] - before.steps[cascade_mode] >= cascade_steps
    llm.shutdown()


def test_cascade_takes_the_cascade_attention_path(tiny_llama, no_caching, monkeypatch):
    _, ref_batch = no_caching
    calls = []

    def counting(*args, **kwargs):
        calls.append(args[7])  # num_prefix_blocks
        return cascade_ref(*args, **kwargs)

    cascade_ref = torch_backend.cascade_attention_ref
    monkeypatch.setattr(torch_backend, "cascade_attention_ref", counting)
    llm = make_llm(tiny_llama, "PIECEWISE", enable_cascade_attention=True)
    llm.engine.client.core.runner.cascade_rule = CascadeCostRule(32, 4)
    outs = llm.generate([SYSTEM + t for t in TAILS], GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in ref_batch]
    num_layers = 2
    assert len(calls) == 7 * num_layers and set(calls) == {4}
    # PIECEWISE mode: the step was piecewise anyway, so no fallback is counted
    assert llm.engine.client.core.runner.graph_stats.eager_fallbacks["cascade"] == 0
    llm.shutdown()


def test_cache_salt_shares_cached_blocks_only_within_a_salt(tiny_llama, no_caching):
    """vLLM's prompt dict {"prompt_token_ids": ..., "cache_salt": ...}: the same salt hits the
    blocks an earlier request cached, another salt or none does not, a prompt without the field
    behaves as before; the tokens are those of caching off every time."""
    _, ref_batch = no_caching
    prompt = SYSTEM + TAILS[3]  # 84 tokens: 5 full blocks, all of them a hit may cover
    llm = make_llm(tiny_llama)

    def run(salt: str | None) -> tuple[int | None, list[int]]:
        p = prompt if salt is None else {"prompt_token_ids": prompt, "cache_salt": salt}
        out = llm.generate(p, GREEDY, use_tqdm=False)[0]
        return out.num_cached_tokens, out.outputs[0].token_ids

    runs = [run(salt) for salt in ("tenantA", "tenantA", "tenantB", None, None, "tenantB")]
    assert [cached for cached, _ in runs] == [0, 80, 0, 0, 80, 80]
    assert all(tokens == ref_batch[3].outputs[0].token_ids for _, tokens in runs)
    with pytest.raises(ValueError, match="cache_salt' must be a non-empty string"):
        llm.generate({"prompt_token_ids": prompt, "cache_salt": ""}, GREEDY, use_tqdm=False)
    llm.shutdown()

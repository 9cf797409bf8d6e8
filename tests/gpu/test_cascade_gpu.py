"""Cascade attention in the engine on CUDA: greedy tokens of a batch sharing a long prefix are
the same eager without cascade (NONE) and with cascade steps under FULL_AND_PIECEWISE, where the
cascade steps run PIECEWISE and FULL never runs one. The kernel itself is checked against the
float32 reference in tests/kernels/test_cascade_attention.py."""

from __future__ import annotations

import gc
import random

import pytest
import torch

from tests.tiny_models import make_tiny_model
from vgraph import LLM, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """head_dim 64 (the csrc CUDA kernels' size), GQA 4:2."""
    return str(
        make_tiny_model(
            "llama",
            tmp_path_factory.mktemp("llama"),
            hidden_size=256,
            num_attention_heads=4,
            head_dim=64,
            max_position_embeddings=1024,
        )
    )


def run(model: str, mode: str, cascade: bool) -> tuple[list[list[int]], object]:
    rng = random.Random(0)
    prefix = [rng.randrange(512) for _ in range(300)]  # 18 full blocks: past the 256-token rule
    prompts = [prefix + [rng.randrange(512) for _ in range(1 + i)] for i in range(12)]
    llm = LLM(
        model,
        dtype="float32",  # exact greedy identity, no bf16 near-ties
        max_model_len=512,
        multiprocess=False,
        enable_cascade_attention=cascade,
        compilation_config={"cudagraph_mode": mode},
        gpu_memory_utilization=0.25,
    )
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    stats = llm.engine.client.core.runner.graph_stats.snapshot()
    llm.shutdown()
    del llm
    gc.collect()
    torch.cuda.empty_cache()
    return [o.outputs[0].token_ids for o in outs], stats


def test_greedy_identity_none_vs_full_and_piecewise_with_cascade(tiny):
    ref, _ = run(tiny, "NONE", cascade=False)
    got, stats = run(tiny, "FULL_AND_PIECEWISE", cascade=True)
    assert got == ref
    # 12 requests of different lengths decode together for most of their 15 decode steps
    assert stats.eager_fallbacks["cascade"] >= 10
    assert stats.steps["PIECEWISE"] >= stats.eager_fallbacks["cascade"]
    eager_cascade, _ = run(tiny, "NONE", cascade=True)
    assert eager_cascade == ref

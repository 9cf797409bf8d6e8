"""Async scheduling on CUDA (bf16, dummy weights), the engine core in its own process: the same
tokens as synchronous scheduling for the three shipped architectures on FULL graphs, and for the
default model with the default graph mode and capture list (prompts of several lengths, so
prefills and decodes mix and the batch shrinks as requests end; greedy and seeded sampling).

With ignore_eos and max_tokens every step holds the same requests in both engines (the async
scheduler schedules no step past max_tokens), so the tokens must be equal, not just close."""

from __future__ import annotations

import gc
import random

import pytest
import torch

from vgraph import LLM, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def generate(name: str, async_scheduling: bool, **kwargs) -> list[list[list[int]]]:
    llm = LLM(
        name,
        load_format="dummy",
        max_model_len=512,
        gpu_memory_utilization=0.3,
        async_scheduling=async_scheduling,
        **kwargs,
    )
    rng = random.Random(0)
    prompts = [[rng.randrange(1000) for _ in range(n)] for n in (7, 64, 130, 19, 33, 90, 1)]
    greedy = [
        SamplingParams(temperature=0, max_tokens=m, ignore_eos=True)
        for m in (40, 3, 25, 60, 1, 17, 33)
    ]
    seeded = SamplingParams(temperature=0.8, top_p=0.9, seed=5, max_tokens=20, ignore_eos=True)
    try:
        runs = [llm.generate(prompts, greedy, use_tqdm=False)]
        runs.append(llm.generate(prompts, seeded, use_tqdm=False))
        return [[o.outputs[0].token_ids for o in outs] for outs in runs]
    finally:
        llm.shutdown()
        del llm
        gc.collect()
        torch.cuda.empty_cache()


@pytest.mark.parametrize("name", ["SmolLM2-135M", "Llama-3.2-1B", "Qwen3-0.6B"])
def test_async_equals_sync_on_full_graphs(name: str) -> None:
    cc = {"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2, 4, 8, 16]}
    sync = generate(name, False, compilation_config=cc)
    assert generate(name, True, compilation_config=cc) == sync
    assert [len(t) for t in sync[0]] == [40, 3, 25, 60, 1, 17, 33]


def test_async_equals_sync_default_model_default_graphs() -> None:
    """SmolLM2-135M, FULL_AND_PIECEWISE and the default capture list (the default engine)."""
    assert generate("SmolLM2-135M", True) == generate("SmolLM2-135M", False)

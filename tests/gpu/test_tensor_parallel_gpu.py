"""Tensor parallelism on two GPUs (NCCL): greedy tokens at tp=2 equal tp=1 in float32 on a tiny
model, eagerly and with the all-reduce captured inside FULL CUDA graphs (and PIECEWISE split at
it), and a killed worker ends the engine with a clear error instead of a hung NCCL collective."""

from __future__ import annotations

import gc
import os
import random
import signal
import time

import pytest
import torch

from tests.tiny_models import make_tiny_model
from vgraph import LLM, SamplingParams
from vgraph.engine.client import EngineDeadError

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices"),
]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    return str(make_tiny_model("llama", tmp_path_factory.mktemp("tiny-llama-tp")))


def generate(model: str, tp: int, mode: str, **comp: object) -> list[list[int]]:
    rng = random.Random(1)
    prompts = [[rng.randrange(512) for _ in range(n)] for n in (3, 17, 40, 9, 5)]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    llm = LLM(
        model,
        dtype="float32",
        max_model_len=256,
        multiprocess=False,
        tensor_parallel_size=tp,
        gpu_memory_utilization=0.3,
        compilation_config={
            "cudagraph_mode": mode,
            "cudagraph_capture_sizes": [1, 2, 4, 8],
            **comp,
        },
    )
    try:
        return [o.outputs[0].token_ids for o in llm.generate([*prompts], params, use_tqdm=False)]
    finally:
        llm.shutdown()
        gc.collect()


@pytest.mark.parametrize(
    ("mode", "comp"),
    [
        ("NONE", {}),
        ("FULL_DECODE_ONLY", {}),
        ("FULL_AND_PIECEWISE", {}),
        (
            "PIECEWISE",
            {"splitting_ops": ["vgraph::unified_attention_with_output", "vgraph::all_reduce"]},
        ),
    ],
)
def test_tp2_equals_tp1_on_two_gpus(tiny_llama: str, mode: str, comp: dict) -> None:
    assert generate(tiny_llama, 2, mode, **comp) == generate(tiny_llama, 1, "NONE")


def test_killed_worker_ends_the_engine(tiny_llama: str) -> None:
    llm = LLM(
        tiny_llama,
        max_model_len=256,
        multiprocess=True,
        tensor_parallel_size=2,
        gpu_memory_utilization=0.3,
    )
    core = llm.engine.client.proc
    try:
        with open(f"/proc/{core.pid}/task/{core.pid}/children") as f:
            (worker,) = (int(p) for p in f.read().split())
        llm.engine.add_tokenized(
            "0", None, [1, 2, 3], SamplingParams(max_tokens=2000, ignore_eos=True)
        )
        llm.engine.step()
        os.kill(worker, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(EngineDeadError, match="tensor parallel worker rank 1"):
            while llm.engine.has_unfinished_requests():
                llm.engine.step()
        assert time.monotonic() - t0 < 15
        core.join(15)
        assert core.exitcode == 1
    finally:
        llm.shutdown()

"""PIECEWISE and FULL_AND_PIECEWISE (CPU recorder backend) give NONE's greedy tokens on a
workload that mixes prefill chunks with decodes, and the counters prove graphs really ran."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from vgraph import LLM, SamplingParams
from vgraph.compilation.piecewise import PiecewiseModel

SIZES = [1, 2, 4, 8, 16]
PROMPT_LENS = (3, 17, 40, 9, 5, 12, 6, 11)
MAX_TOKENS = (5, 12, 20, 8, 16, 3, 9, 14)


def run_workload(
    folder: Path, mode: str, **compilation: Any
) -> tuple[list[list[int]], dict[str, float], list[tuple[bool, int, str]]]:
    """Eight requests of different lengths, at most three running: each admission mixes a new
    prompt (chunked when long: 24-token budget) with running decodes, batch sizes are rarely
    capture sizes, and steps of 17-24 tokens are above the largest capture size.

    -> (tokens per request, runner counters, (uniform decode, tokens, runtime mode) per step)
    """
    rng = random.Random(1)
    prompts = [[rng.randrange(512) for _ in range(n)] for n in PROMPT_LENS]
    params = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in MAX_TOKENS]
    llm = LLM(
        str(folder),
        max_model_len=256,
        max_num_batched_tokens=24,
        max_num_seqs=3,
        multiprocess=False,
        cpu_kv_cache_bytes=1 << 22,
        compilation_config={
            "cudagraph_mode": mode,
            "cudagraph_capture_sizes": SIZES,
            **compilation,
        },
    )
    try:
        runner = llm.engine.client.core.runner
        if mode != "NONE":
            model = getattr(runner.model_fn, "runnable", runner.model_fn)  # under the FULL wrapper
            assert isinstance(model, PiecewiseModel)
        steps: list[tuple[bool, int, str]] = []
        dispatch = runner.dispatch

        def logged_dispatch(sched: Any, **kwargs: Any) -> Any:
            out = dispatch(sched, **kwargs)
            steps.append((sched.is_uniform_decode, sched.total_num_scheduled_tokens, out[0].name))
            return out

        runner.dispatch = logged_dispatch
        outs = llm.generate(prompts, params, use_tqdm=False)
        return [o.outputs[0].token_ids for o in outs], runner.graph_stats, steps
    finally:
        llm.shutdown()


@pytest.fixture(scope="module")
def reference(tiny_checkpoint) -> list[list[int]]:
    tokens, counters, _ = run_workload(tiny_checkpoint("llama"), "NONE")
    assert [len(t) for t in tokens] == list(MAX_TOKENS)
    assert counters.steps["PIECEWISE"] == counters.steps["FULL"] == 0
    return tokens


def test_piecewise_equals_none(reference, tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("VGRAPH_DEBUG_GRAPHS", "1")  # every replay checks its input addresses
    got, c, steps = run_workload(tiny_checkpoint("llama"), "PIECEWISE", cache_dir=str(tmp_path))
    assert got == reference
    assert c.num_graphs == len(SIZES)
    # every step up to the largest capture size replayed pieces; only larger ones ran eager
    assert all(mode == ("PIECEWISE" if n <= SIZES[-1] else "NONE") for _, n, mode in steps)
    mixed = [n for uniform, n, mode in steps if not uniform and mode == "PIECEWISE"]
    assert len(mixed) >= 3 and any(n not in SIZES for n in mixed)
    assert c.steps["PIECEWISE"] >= 20 and c.steps["FULL"] == 0
    assert c.steps["NONE"] >= 1 and c.eager_fallbacks["above_max_size"] == c.steps["NONE"]
    assert c.padded_tokens > 0


def test_full_and_piecewise_equals_none(reference, tiny_checkpoint, tmp_path):
    got, c, steps = run_workload(
        tiny_checkpoint("llama"), "FULL_AND_PIECEWISE", cache_dir=str(tmp_path)
    )
    assert got == reference
    # FULL decode graphs only up to max_num_seqs=3 requests (sizes 1, 2), pieces for every size
    assert c.num_graphs == 2 + len(SIZES)
    for uniform, n, mode in steps:
        if n > SIZES[-1]:
            assert mode == "NONE"
        elif uniform and n <= 2:
            assert mode == "FULL"
        else:  # mixed steps, and decodes of 3 requests (padded to 4: no FULL graph of 4)
            assert mode == "PIECEWISE"
    assert sum(not uniform and mode == "PIECEWISE" for uniform, _, mode in steps) >= 3
    assert c.steps["FULL"] >= 5 and c.steps["PIECEWISE"] >= 3 and c.steps["NONE"] >= 1


def test_piecewise_equals_none_qwen3(tiny_checkpoint, tmp_path):
    """Qwen3's per-head q/k norms put more ops into each piece (Qwen2: tests/compilation)."""
    folder = tiny_checkpoint("qwen3")
    ref, _, _ = run_workload(folder, "NONE")
    got, c, _ = run_workload(folder, "PIECEWISE", cache_dir=str(tmp_path))
    assert got == ref and c.steps["PIECEWISE"] >= 20


def test_debug_mode_catches_a_runner_that_hands_pieces_fresh_inputs(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """The runner's contract: input_ids/positions are views of its static buffers. A runner that
    passes copies would make the first piece replay stale inputs; debug mode says so at once."""
    from vgraph.worker.model_runner import ModelRunner

    execute_forward = ModelRunner.execute_forward

    def forgetful(self: ModelRunner, step: Any, *args: Any, **kwargs: Any) -> Any:
        gpu = step.layout.gpu  # same contents, a new address every step
        fresh = gpu._replace(input_ids=gpu.input_ids.clone())
        step = dataclasses.replace(step, layout=dataclasses.replace(step.layout, gpu=fresh))
        return execute_forward(self, step, *args, **kwargs)

    monkeypatch.setattr(ModelRunner, "execute_forward", forgetful)
    monkeypatch.setenv("VGRAPH_DEBUG_GRAPHS", "1")
    with pytest.raises(AssertionError, match="not at their captured addresses"):
        run_workload(tiny_checkpoint("llama"), "PIECEWISE", cache_dir=str(tmp_path))

"""Tensor parallelism on the CPU: two ranks over gloo on a tiny model give tp=1's greedy tokens in
eager mode and in the graph modes (CPU recorder), and a killed worker ends the engine cleanly."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from vgraph import LLM, SamplingParams
from vgraph.engine.client import EngineDeadError

SIZES = [1, 2, 4, 8]
KV_BYTES = 1 << 22  # a small cache: allocating (and zeroing) it is start-up time on every rank
ATTENTION_OP = "vgraph::unified_attention_with_output"


def workload() -> tuple[list[list[int]], list[SamplingParams]]:
    """5 requests (not a capture size) of different lengths, finishing at different steps."""
    rng = random.Random(1)
    prompts = [[rng.randrange(512) for _ in range(n)] for n in (3, 17, 40, 9, 5)]
    params = [
        SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in (5, 12, 20, 8, 16)
    ]
    return prompts, params


def generate(model: Path, tp: int, mode: str = "NONE", **comp: object):
    """-> (token ids per request, rank 0's graph stats)."""
    llm = LLM(
        str(model),
        max_model_len=256,
        multiprocess=False,
        tensor_parallel_size=tp,
        cpu_kv_cache_bytes=KV_BYTES,
        compilation_config={"cudagraph_mode": mode, "cudagraph_capture_sizes": SIZES, **comp},
    )
    try:
        prompts, params = workload()
        outs = llm.generate(prompts, params, use_tqdm=False)
        return [o.outputs[0].token_ids for o in outs], llm.engine.client.core.runner.graph_stats
    finally:
        llm.shutdown()


@pytest.fixture(scope="module")
def tiny_llama(tiny_checkpoint) -> Path:
    return tiny_checkpoint("llama")  # 4 heads, 2 KV heads: one KV head per rank


@pytest.fixture(scope="module")
def reference(tiny_llama) -> list[list[int]]:
    tokens, _ = generate(tiny_llama, tp=1)
    assert [len(t) for t in tokens] == [5, 12, 20, 8, 16]
    return tokens


def test_tp2_equals_tp1_eager(tiny_llama, reference) -> None:
    tokens, stats = generate(tiny_llama, tp=2)
    assert tokens == reference
    assert stats.steps["NONE"] >= 20


def test_tp2_full_decode_only_equals_tp1(tiny_llama, reference) -> None:
    tokens, stats = generate(tiny_llama, tp=2, mode="FULL_DECODE_ONLY")
    assert tokens == reference
    assert stats.num_graphs == len(SIZES)
    assert stats.steps["FULL"] >= 15  # decodes replayed graphs holding the all-reduces


def test_tp2_full_and_piecewise_split_at_all_reduce_equals_tp1(tiny_llama, reference) -> None:
    """PIECEWISE split at the all-reduce too (the splitting-op option); FULL decode graphs."""
    tokens, stats = generate(
        tiny_llama,
        tp=2,
        mode="FULL_AND_PIECEWISE",
        splitting_ops=[ATTENTION_OP, "vgraph::all_reduce"],
        piecewise_capture_sizes=[80],  # the first step: 74 prompt tokens
    )
    assert tokens == reference
    assert stats.steps["FULL"] >= 15
    assert stats.steps["PIECEWISE"] >= 1  # the prefill steps


def test_fewer_kv_heads_than_ranks_replicates_them(tiny_checkpoint) -> None:
    model = tiny_checkpoint("llama", num_key_value_heads=1)
    ref, _ = generate(model, tp=1)
    tokens, _ = generate(model, tp=2)
    assert tokens == ref


def test_tp_must_divide_the_heads(tiny_llama) -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size=3 must divide"):
        LLM(str(tiny_llama), tensor_parallel_size=3, multiprocess=False)


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has ended
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc (Linux)")
def test_killed_worker_ends_the_engine_with_a_clear_error(tiny_llama) -> None:
    llm = LLM(
        str(tiny_llama),
        max_model_len=512,
        multiprocess=True,
        tensor_parallel_size=2,
        cpu_kv_cache_bytes=KV_BYTES,
        enforce_eager=True,
    )
    core = llm.engine.client.proc
    try:
        (worker,) = _children(core.pid)
        # the core steps on its own: the worker dies while this request is far from done, also
        # when a loaded machine leaves this process waiting (a request that finished before the
        # kill would leave nothing to wait for)
        llm.engine.add_tokenized(
            "0", None, [1, 2, 3], SamplingParams(max_tokens=500, ignore_eos=True)
        )
        os.kill(worker, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(EngineDeadError, match="tensor parallel worker rank 1") as info:
            while llm.engine.has_unfinished_requests():
                llm.engine.step()
        assert time.monotonic() - t0 < 10, "the engine took too long to report the dead worker"
        assert f"pid {worker}" in str(info.value)
        core.join(10)
        assert core.exitcode == 1
        assert _gone(worker)
    finally:
        llm.shutdown()
    assert _gone(core.pid)

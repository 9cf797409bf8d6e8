"""FULL graphs (CPU recorder backend) agree with eager NONE, and the recorder catches a runner
that forgets to copy new inputs into its static buffers. On the CPU on every machine (device
cpu): the recorder is what these tests are about, and on a GPU host each engine of the file
would hold most of the device's memory (CUDA graphs: tests/gpu)."""

from __future__ import annotations

import dataclasses
import logging
import random

import pytest
import torch

from tests.tiny_models import make_tiny_model
from vgraph import LLM, SamplingParams
from vgraph.config.modes import CUDAGraphMode
from vgraph.worker.input_batch import InputBuffers
from vgraph.worker.model_runner import ModelRunner

SIZES = [1, 2, 4, 8]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return str(make_tiny_model("llama", tmp_path_factory.mktemp("tiny-llama")))


def workload():
    """5 requests (not a capture size) of different lengths, finishing at different steps."""
    rng = random.Random(1)
    prompts = [[rng.randrange(512) for _ in range(n)] for n in (3, 17, 40, 9, 5)]
    params = [
        SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in (5, 12, 20, 8, 16)
    ]
    return prompts, params


def run(model, mode, splitting_ops=None, **kw):
    comp = {"cudagraph_mode": mode, "cudagraph_capture_sizes": SIZES}
    if splitting_ops is not None:
        comp["splitting_ops"] = splitting_ops
    llm = LLM(
        model, max_model_len=256, multiprocess=False, compilation_config=comp, device="cpu", **kw
    )
    prompts, params = workload()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs], llm.engine.client.core.runner


def test_full_decode_only_equals_none(tiny_llama):
    ref, _ = run(tiny_llama, "NONE")
    got, runner = run(tiny_llama, "FULL_DECODE_ONLY")
    assert got == ref
    g = runner.graph_stats
    assert g.num_graphs == len(SIZES)
    assert g.steps["FULL"] >= 15  # decode steps replayed graphs
    assert g.steps["NONE"] >= 1  # the prefill ran eager
    assert g.padded_tokens > 0  # 5, 3 live requests were padded up to 8, 4
    assert [len(t) for t in got] == [5, 12, 20, 8, 16]


def test_full_with_torch_backend_downgrades_with_one_warning(tiny_llama, caplog):
    with caplog.at_level(logging.WARNING):
        got, runner = run(tiny_llama, "FULL")
    # piecewise compilation is available: mixed steps get pieces instead of running eager
    assert runner.cudagraph_mode is CUDAGraphMode.FULL_AND_PIECEWISE
    warnings = [r.getMessage() for r in caplog.records if "cudagraph_mode FULL" in r.getMessage()]
    assert len(warnings) == 1 and "'torch'" in warnings[0]
    assert "UNIFORM_SINGLE_TOKEN_DECODE" in warnings[0]
    ref, _ = run(tiny_llama, "NONE")
    assert got == ref


def test_full_without_splitting_ops_downgrades_to_full_decode_only(tiny_llama, caplog):
    with caplog.at_level(logging.WARNING):
        got, runner = run(tiny_llama, "FULL", splitting_ops=[])  # no pieces to fall back on
    assert runner.cudagraph_mode is CUDAGraphMode.FULL_DECODE_ONLY
    warnings = [r.getMessage() for r in caplog.records if "cudagraph_mode FULL" in r.getMessage()]
    assert len(warnings) == 1 and "FULL_DECODE_ONLY" in warnings[0]
    ref, _ = run(tiny_llama, "NONE")
    assert got == ref


def test_full_graphs_record_the_input_copy(tiny_llama, monkeypatch):
    """A FULL replay's inputs reach the device by the graph's own first node: input preparation
    leaves the copy out for exactly the FULL steps (one host call fewer each), and the tokens are
    NONE's; with the switch off every step copies on the host, to the same tokens."""
    copies = []
    copy_to_device = InputBuffers.copy_to_device

    def counted(self, step):
        copies.append(step.num_tokens_padded)
        copy_to_device(self, step)

    monkeypatch.setattr(InputBuffers, "copy_to_device", counted)
    ref, _ = run(tiny_llama, "NONE")
    host_copies = {}
    for in_graph in (True, False):
        monkeypatch.setattr(ModelRunner, "full_graphs_copy_inputs", in_graph)
        copies.clear()
        got, runner = run(tiny_llama, "FULL_DECODE_ONLY")
        assert got == ref
        host_copies[in_graph] = len(copies)
        full_steps = runner.graph_stats.steps["FULL"]
    assert full_steps >= 15
    # with the copy in the graph, each capture calls it once (recording it), no replay does
    assert host_copies[False] - host_copies[True] == full_steps - len(SIZES)


def _forgetful_prepare(prepare):
    """A runner bug: each step's input ids and positions land in fresh tensors instead of the
    static buffers a captured graph reads (the real execute_forward then hands those over); the
    static buffers, the device ones and their host twins that a FULL graph copies from, never get
    them (here they are cleared)."""

    def prepare_into_fresh_tensors(self, *args, **kwargs):
        step = prepare(self, *args, **kwargs)
        gpu, host = step.layout.gpu, step.layout.cpu
        fresh = gpu._replace(input_ids=gpu.input_ids.clone(), positions=gpu.positions.clone())
        for t in (gpu.input_ids, gpu.positions, host.input_ids, host.positions):
            t.zero_()
        step.layout = dataclasses.replace(step.layout, gpu=fresh)
        return step

    return prepare_into_fresh_tensors


def test_recorder_returns_stale_results_when_inputs_are_not_copied(tiny_llama, monkeypatch):
    ref, _ = run(tiny_llama, "NONE")
    monkeypatch.setattr(InputBuffers, "prepare", _forgetful_prepare(InputBuffers.prepare))
    eager, _ = run(tiny_llama, "NONE")
    assert eager == ref  # eager never notices the bug
    stale, runner = run(tiny_llama, "FULL_DECODE_ONLY")
    assert runner.graph_stats.steps["FULL"] > 0
    assert stale != ref  # the replayed graph read the captured buffers, not the new tensors


def test_full_with_csrc_backend_captures_mixed_steps(tiny_llama):
    from vgraph.attention.csrc_backend import CsrcAttentionBackend
    from vgraph.cudagraph.dispatcher import BatchDescriptor

    why_not = CsrcAttentionBackend.is_available(torch.device("cpu"))
    if why_not:
        pytest.skip(why_not)
    ref, _ = run(tiny_llama, "NONE", attention_backend="csrc", max_num_batched_tokens=8)
    got, runner = run(tiny_llama, "FULL", attention_backend="csrc", max_num_batched_tokens=8)
    assert runner.cudagraph_mode is CUDAGraphMode.FULL
    assert BatchDescriptor(8) in runner.dispatcher.keys[CUDAGraphMode.FULL]  # mixed key
    # chunked prefills and mixed steps replayed full graphs too
    assert runner.graph_stats.steps["NONE"] == 0
    assert got == ref
    torch_ref, _ = run(tiny_llama, "NONE")
    assert got == torch_ref  # and the csrc kernels agree with the torch backend


def _held_bytes(runner: ModelRunner, keys: set | None = None) -> int:
    """Bytes of the distinct storages the runner's CPU graphs (of keys; all when None) refer
    to beyond their inputs: weights, KV caches and the runner's static buffers."""
    inputs = [*runner.model.parameters(), *runner.model.buffers(), *runner.kv_caches.values()]
    inputs += [runner.buffers.host, runner.buffers.device]
    skip = {t.untyped_storage().data_ptr() for t in inputs}
    wrappers = [p.graph for p in getattr(runner.model_fn, "backend", runner.model_fn).pieces] if (
        runner.cudagraph_mode is CUDAGraphMode.PIECEWISE
    ) else [runner.logits_fn]  # fmt: skip
    held: dict[int, int] = {}
    for wrapper in wrappers:
        for key, entry in wrapper.entries.items():
            if keys is not None and key not in keys:
                continue
            for op in entry.graph.ops:
                for t in [*op.args, *op.kwargs.values(), *op.outputs]:
                    if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in skip:
                        held[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(held.values())


@pytest.mark.parametrize("mode", ["FULL_DECODE_ONLY", "PIECEWISE"])
def test_graphs_of_many_sizes_hold_about_one_sizes_memory(tiny_llama, mode):
    """The CPU recorder shares memory between graphs as a CUDA graph pool does: graphs of
    many sizes hold about what the largest one needs, not every intermediate of every capture
    (which grew the default model past 21 GB with the default capture list)."""
    sizes = [1, 2, 4, 8, 12, 16, 24, 32]
    llm = LLM(
        tiny_llama,
        max_model_len=256,
        multiprocess=False,
        compilation_config={"cudagraph_mode": mode, "cudagraph_capture_sizes": sizes},
        device="cpu",
    )
    prompts, params = workload()
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    ref, _ = run(tiny_llama, "NONE")
    assert got == ref
    runner = llm.engine.client.core.runner
    largest = {key for _, key in runner.dispatcher.capture_keys() if key.num_tokens == 32}
    assert 0 < _held_bytes(runner) <= 1.25 * _held_bytes(runner, largest)

"""GraphStats ride along with the outputs every GRAPH_STATS_EVERY steps and on the step before
the engine goes idle, so the last figures always reach the frontend and the steps between pay
nothing for them."""

from __future__ import annotations

from vgraph.engine import core as core_module
from vgraph.engine.arg_utils import create_engine_config
from vgraph.engine.core import EngineCore
from vgraph.engine.protocol import EngineCoreRequest
from vgraph.sampling_params import SamplingParams


def test_graph_stats_sent_periodically_and_before_idle(tiny_checkpoint, monkeypatch):
    monkeypatch.setattr(core_module, "GRAPH_STATS_EVERY", 4)
    core = EngineCore(create_engine_config(str(tiny_checkpoint("llama")), max_model_len=64))
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    core.add_request(EngineCoreRequest("r", [1, 2, 3], params, []))
    sent = []
    while core.has_unfinished_requests():
        stats = core.step().scheduler_stats
        sent.append(None if stats.graph_stats is None else sum(stats.graph_stats.steps.values()))
    assert sent == [None, None, None, 4, None, None, None, 8, None, 10]
    assert core.stats().graph_stats.decode_batch_sizes == {1: 9}  # utility calls: always sent

"""The split of the traced model: N + 1 captured pieces around N eager attention calls, in the
original order, with each attention output buffer allocated inside the piece before it."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from tests.compilation.runner_utils import load_runner
from tests.tiny_models import ARCHS
from vgraph.compilation.piecewise import PiecewiseModel
from vgraph.config import ATTENTION_OP
from vgraph.forward_context import ForwardContext, set_forward_context
from vgraph.layers.attention import unified_attention

NUM_LAYERS = 3


@pytest.mark.parametrize("arch", ARCHS)
def test_split_yields_num_layers_plus_one_pieces(arch, tiny_checkpoint, tmp_path):
    runner = load_runner(tiny_checkpoint(arch, num_hidden_layers=NUM_LAYERS), tmp_path)
    model = runner.model_fn
    assert isinstance(model, PiecewiseModel)
    items = model.backend.items
    kinds = [item.is_splitting for item in items]
    assert kinds == [False, True] * NUM_LAYERS + [False]  # piece, attention, piece, ...
    assert model.stats.num_pieces == NUM_LAYERS + 1
    assert model.stats.num_splitting_ops == NUM_LAYERS

    for i, item in enumerate(items):
        code = item.module.code
        if item.is_splitting:
            # one attention call, nothing else: no allocation, no compute; it runs the op's
            # body directly, not through the dispatcher
            calls = [n for n in item.module.graph.nodes if n.op == "call_function"]
            assert len(calls) == 1 and calls[0].target is unified_attention
            assert f"model.layers.{i // 2}.self_attn.attn" in code  # layers in original order
            # the output buffer it writes into was allocated by the captured piece before it
            assert item.buffer_pids == [items[i - 1].partition_id]
            assert "empty_like" in items[i - 1].module.code
            # this step's K/V go into the cache inside the captured piece before
            assert "vgraph.kv_cache_update" in items[i - 1].module.code
        else:
            assert "unified_attention_with_output" not in code
            assert item.eager_inputs == ()  # nothing fresh flows from attention into a piece
    assert "embedding" in items[0].module.code
    assert "embedding" not in items[-1].module.code

    # called outside any graph mode, the pieces in order compute what the eager model computes
    ids = torch.randint(0, 512, (7,))  # not the traced size, not a capture size
    pos = torch.arange(7)
    with torch.inference_mode(), set_forward_context(ForwardContext(attn_metadata=None)):
        torch.testing.assert_close(model(ids, pos), runner.model(ids, pos))


def test_default_splitting_op_is_the_attention_op(tiny_checkpoint, tmp_path):
    runner = load_runner(tiny_checkpoint("llama"), tmp_path)
    assert runner.config.compilation_config.splitting_ops == (ATTENTION_OP,)
    assert runner.model_fn.stats.num_pieces == 3


@pytest.mark.parametrize("op", ["vgraph::no_such_op", "vllm::unified_attention_with_output_x"])
def test_splitting_op_not_in_the_model_is_an_error(op, tiny_checkpoint, tmp_path):
    """Attention left inside the captured pieces would replay stale lengths: refuse it."""
    with pytest.raises(ValueError, match=r"splitting_ops \[.*\] do not occur in the model"):
        load_runner(tiny_checkpoint("llama"), tmp_path, splitting_ops=[op])


@pytest.mark.parametrize("op", ["vllm::unified_attention_with_output", "vllm::unified_attention"])
def test_vllm_attention_op_name_is_an_alias_of_ours(op, tiny_checkpoint, tmp_path):
    runner = load_runner(tiny_checkpoint("llama"), tmp_path, splitting_ops=[op])
    assert runner.config.compilation_config.splitting_ops == (ATTENTION_OP,)
    assert runner.model_fn.stats.num_pieces == 3


def test_pieces_and_their_graphs_die_with_the_engine(tiny_checkpoint, tmp_path):
    """Dynamo keeps backends and compiled functions alive for the whole process; the split must
    not hang off them, or every engine's graphs (and their memory pool) would leak."""
    runner = load_runner(tiny_checkpoint("llama"), tmp_path)
    piece = weakref.ref(runner.model_fn.backend.pieces[0])
    model = weakref.ref(runner.model_fn)
    del runner
    gc.collect()
    assert model() is None and piece() is None

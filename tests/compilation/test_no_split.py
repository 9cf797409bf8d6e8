"""`splitting_ops: []` means no split: no piecewise graphs, and the modes that need them are
downgraded at start-up with one warning each."""

from __future__ import annotations

import logging

import pytest

from vgraph.attention.torch_backend import TorchAttentionBackend
from vgraph.config import CompilationConfig, VGraphConfig
from vgraph.config.modes import AttentionCGSupport
from vgraph.config.modes import CUDAGraphMode as M
from vgraph.engine.arg_utils import create_engine_config
from vgraph.worker.model_runner import ModelRunner


def test_piecewise_available_needs_splitting_ops():
    assert CompilationConfig().piecewise_available()  # None: the default attention op
    assert CompilationConfig(splitting_ops=("vgraph::x",)).piecewise_available()
    assert not CompilationConfig(splitting_ops=()).piecewise_available()


def create(folder, mode: str, caplog) -> tuple[VGraphConfig, list[str]]:
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        config = create_engine_config(
            str(folder),
            max_model_len=128,
            max_num_batched_tokens=16,
            compilation_config={
                "cudagraph_mode": mode,
                "splitting_ops": [],
                "cudagraph_capture_sizes": [1, 2, 4],
            },
        )
    return config, [r.getMessage() for r in caplog.records if "cudagraph_mode" in r.getMessage()]


@pytest.mark.parametrize(
    "mode, support, expected",
    [
        ("PIECEWISE", AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE, M.NONE),
        ("FULL_AND_PIECEWISE", AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE, M.FULL_DECODE_ONLY),
        ("FULL_AND_PIECEWISE", AttentionCGSupport.ALWAYS, M.FULL),
    ],
)
def test_modes_needing_pieces_are_downgraded_with_one_warning(
    mode, support, expected, tiny_checkpoint, caplog, monkeypatch
):
    monkeypatch.setattr(TorchAttentionBackend, "cudagraph_support", support)
    config, warnings = create(tiny_checkpoint("llama"), mode, caplog)
    assert config.compilation_config.cudagraph_mode is expected
    assert len(warnings) == 1
    assert f"cudagraph_mode {mode}" in warnings[0] and "splitting_ops is empty" in warnings[0]
    assert expected.name in warnings[0]


def test_no_split_means_no_compile(tiny_checkpoint, caplog):
    config, _ = create(tiny_checkpoint("llama"), "PIECEWISE", caplog)
    runner = ModelRunner(config)
    runner.load_model()
    assert runner.model_fn is runner.model  # not traced, not wrapped
    assert runner.dispatcher.capture_keys() == []

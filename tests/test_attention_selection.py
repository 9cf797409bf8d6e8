"""Attention backend selection, the flashinfer backend's config errors and graph-mode downgrade,
and its page arrays: everything about it that runs without CUDA or the flashinfer package."""

from __future__ import annotations

import importlib.util
import logging

import numpy as np
import pytest
import torch

from vgraph.attention import selector
from vgraph.attention.csrc_backend import CsrcAttentionBackend
from vgraph.attention.flashinfer_backend import FlashInferAttentionBackend, paged_kv_arrays
from vgraph.config import CompilationConfig
from vgraph.config.modes import AttentionCGSupport, CUDAGraphMode
from vgraph.engine.arg_utils import create_engine_config

CUDA = torch.device("cuda")  # a device object only: nothing here touches a GPU


@pytest.fixture
def no_flashinfer(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "flashinfer" else real(name)
    )


def test_flashinfer_is_a_backend_name():
    assert selector.backend_names() == ["csrc", "flashinfer", "torch"]
    assert FlashInferAttentionBackend.cudagraph_support is (
        AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    )


def test_flashinfer_missing_names_the_extra(no_flashinfer):
    for device in (CUDA, torch.device("cpu")):
        match = r"attention_backend='flashinfer'.*vgraph\[flashinfer\]"
        with pytest.raises(ValueError, match=match):
            selector.resolve_backend_name("flashinfer", device, 64)


def test_engine_config_refuses_flashinfer_on_the_cpu():
    """The whole builder, as `vgraph serve --attention-backend flashinfer` reaches it."""
    with pytest.raises(ValueError, match="attention_backend='flashinfer' is not usable on cpu"):
        create_engine_config(
            "SmolLM2-135M", load_format="dummy", attention_backend="flashinfer", device="cpu"
        )


def test_flashinfer_head_dims(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert FlashInferAttentionBackend.is_available(CUDA, 128) is None
    assert "head_dim" in FlashInferAttentionBackend.is_available(CUDA, 96)
    assert "CUDA" in FlashInferAttentionBackend.is_available(torch.device("cpu"), 64)


@pytest.mark.parametrize(
    "csrc_ok,flashinfer_ok,expected",
    [(True, True, "csrc"), (False, True, "flashinfer"), (False, False, "torch")],
)
def test_auto_prefers_csrc_then_flashinfer_on_cuda(
    monkeypatch, caplog, csrc_ok, flashinfer_ok, expected
):
    for cls, ok in ((CsrcAttentionBackend, csrc_ok), (FlashInferAttentionBackend, flashinfer_ok)):
        monkeypatch.setattr(
            cls, "is_available", classmethod(lambda c, d, h=None, ok=ok: None if ok else "no")
        )
    with caplog.at_level(logging.WARNING):
        assert selector.resolve_backend_name("auto", CUDA, 64) == expected
    assert ("no fast backend" in caplog.text) == (expected == "torch")
    assert selector.resolve_backend_name("auto", torch.device("cpu"), 64) == "torch"


def test_full_resolves_to_full_and_piecewise_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="vgraph.config.compilation"):
        comp = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL).resolve(
            torch.device("cpu"),
            max_num_seqs=64,
            max_num_batched_tokens=512,
            attention_backend="flashinfer",
            attention_support=FlashInferAttentionBackend.cudagraph_support,
        )
    assert comp.cudagraph_mode is CUDAGraphMode.FULL_AND_PIECEWISE
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    msg = warnings[0].getMessage()
    assert "'flashinfer'" in msg and "UNIFORM_SINGLE_TOKEN_DECODE" in msg
    assert "using FULL_AND_PIECEWISE" in msg


def test_full_without_piecewise_resolves_to_full_decode_only():
    comp = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL, splitting_ops=()).resolve(
        torch.device("cpu"), 64, 512, "flashinfer", FlashInferAttentionBackend.cudagraph_support
    )
    assert comp.cudagraph_mode is CUDAGraphMode.FULL_DECODE_ONLY


def test_paged_kv_arrays_describe_each_requests_pages():
    table = torch.arange(40, dtype=torch.int32).view(4, 10)  # request r owns 10r..10r+9
    seq_lens = np.array([1, 16, 17, 40], dtype=np.int32)
    indptr, indices, last = paged_kv_arrays(table, seq_lens, batch=6, block_size=16)
    assert indptr.tolist() == [0, 1, 2, 4, 7, 7, 7]  # pads: no pages
    assert indices.tolist() == [0, 10, 20, 21, 30, 31, 32]
    assert last.tolist() == [1, 16, 1, 8, 1, 1]  # pads: FlashInfer's last page of 1
    assert indptr.dtype == indices.dtype == last.dtype == torch.int32

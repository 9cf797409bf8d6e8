"""One padding rule for capture and replay: a FULL replay runs with exactly the token and request
counts its graph was captured with (CudagraphDispatcher.num_reqs_padded decides both)."""

from __future__ import annotations

import random

import pytest
import torch

from tests.tiny_models import make_tiny_model
from vgraph import LLM, SamplingParams
from vgraph.config.modes import CUDAGraphMode
from vgraph.cudagraph.counters import EAGER_REASONS, RUNTIME_MODE_NAMES
from vgraph.cudagraph.dispatcher import BatchDescriptor as BD
from vgraph.cudagraph.dispatcher import CudagraphDispatcher, EagerReason
from vgraph.worker.model_runner import ModelRunner

SIZES = [1, 2, 4, 8]


def test_num_reqs_padded_per_key():
    d = CudagraphDispatcher(CUDAGraphMode.FULL, SIZES, 2, max_num_reqs=6)
    assert d.num_reqs_padded(BD(4, 4, True)) == 4  # uniform decode: one token per request
    assert d.num_reqs_padded(BD(4)) == 4  # relaxed: as many requests as tokens ...
    assert d.num_reqs_padded(BD(8)) == 6  # ... but never above max_num_reqs


def test_graph_stats_names_match_the_enums():
    assert set(EAGER_REASONS) == {r.value for r in EagerReason}
    assert set(RUNTIME_MODE_NAMES) == {"NONE", "PIECEWISE", "FULL"}


def _record_forwards(monkeypatch) -> list[tuple[bool, CUDAGraphMode, BD | None, int, int]]:
    seen = []
    forward = ModelRunner.execute_forward

    def spy(self, step, common, mode=CUDAGraphMode.NONE, key=None, capturing=False):
        seen.append((capturing, mode, key, step.num_tokens_padded, step.num_reqs_padded))
        return forward(self, step, common, mode, key, capturing)

    monkeypatch.setattr(ModelRunner, "execute_forward", spy)
    return seen


@pytest.mark.parametrize("backend, mode", [("torch", "FULL_DECODE_ONLY"), ("csrc", "FULL")])
def test_replay_uses_the_captured_counts(backend, mode, tmp_path, monkeypatch):
    if backend == "csrc":
        from vgraph.attention.csrc_backend import CsrcAttentionBackend

        why_not = CsrcAttentionBackend.is_available(torch.device("cpu"))
        if why_not:
            pytest.skip(why_not)
    seen = _record_forwards(monkeypatch)
    llm = LLM(
        str(make_tiny_model("llama", tmp_path)),
        multiprocess=False,
        max_model_len=128,
        max_num_seqs=6,
        max_num_batched_tokens=8,
        attention_backend=backend,
        compilation_config={"cudagraph_mode": mode, "cudagraph_capture_sizes": SIZES},
    )
    rng = random.Random(0)
    prompts = [[rng.randrange(256) for _ in range(n)] for n in (3, 9, 2, 5, 4, 7)]
    params = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in range(3, 9)]
    llm.generate(prompts, params, use_tqdm=False)

    captured = {key: (t, r) for capturing, m, key, t, r in seen if capturing}
    replays = [
        (key, t, r) for capturing, m, key, t, r in seen if m is CUDAGraphMode.FULL and not capturing
    ]
    assert len({key for key, _, _ in replays}) >= 3  # several graphs of different sizes replayed
    for key, t, r in replays:
        assert (t, r) == captured[key], key
    if mode == "FULL":  # mixed steps replayed relaxed keys, padded to more requests than real
        assert any(not key.uniform for key, _, _ in replays)

"""CompilationConfig parsing (JSON string, dict, object) and capture-size resolution."""

from __future__ import annotations

import logging

import pytest
import torch

from vgraph.config import AttentionCGSupport, CompilationConfig
from vgraph.config.modes import CUDAGraphMode
from vgraph.engine.engine_args import EngineArgs

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def resolve(
    cc: CompilationConfig,
    device: torch.device,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
) -> CompilationConfig:
    """Resolution against a backend that allows every mode (downgrades are tested elsewhere)."""
    return cc.resolve(
        device, max_num_seqs, max_num_batched_tokens, "fake", AttentionCGSupport.ALWAYS
    )


def test_parse_json_dict_and_object_agree():
    text = '{"cudagraph_mode": "full_decode_only", "cudagraph_capture_sizes": [8, 1, 2, 2]}'
    a = CompilationConfig.parse(text)
    b = CompilationConfig.parse(
        {"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [8, 1, 2, 2]}
    )
    assert a == b == CompilationConfig.parse(a)
    assert a.cudagraph_mode is CUDAGraphMode.FULL_DECODE_ONLY


@pytest.mark.parametrize(
    "bad, match",
    [
        ("{", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"cuda_graph_mode": "FULL"}', r"unknown key\(s\) \['cuda_graph_mode'\].*allowed keys"),
        ('{"cudagraph_mode": 3}', "cudagraph_mode=3 is not allowed"),
        ('{"cudagraph_capture_sizes": "1,2"}', "cudagraph_capture_sizes='1,2' must be a list"),
        ('{"cudagraph_capture_sizes": [0, 4]}', "every size must be >= 1"),
        (
            '{"max_cudagraph_capture_size": -1}',
            "max_cudagraph_capture_size=-1 must be an integer >= 1",
        ),
        ('{"cudagraph_num_of_warmups": 1.5}', "cudagraph_num_of_warmups=1.5"),
        ('{"splitting_ops": "attn"}', "splitting_ops='attn' must be a list"),
        ('{"use_inductor": "yes"}', "use_inductor='yes' must be true or false"),
        ('{"enforce_eager": true, "cudagraph_mode": "FULL"}', "enforce_eager=true contradicts"),
    ],
)
def test_parse_errors_name_the_key(bad, match):
    with pytest.raises(ValueError, match=match):
        CompilationConfig.parse(bad)


def test_auto_mode_per_device():
    assert resolve(CompilationConfig(), CPU).cudagraph_mode is CUDAGraphMode.NONE
    assert resolve(CompilationConfig(), CUDA).cudagraph_mode is CUDAGraphMode.FULL_AND_PIECEWISE
    eager = resolve(CompilationConfig(enforce_eager=True), CUDA)
    assert eager.cudagraph_mode is CUDAGraphMode.NONE


def test_default_capture_sizes():
    sizes = resolve(CompilationConfig(), CPU, max_num_seqs=256).cudagraph_capture_sizes
    expected = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert list(sizes) == expected
    small = resolve(CompilationConfig(), CPU, max_num_seqs=8)
    assert list(small.cudagraph_capture_sizes) == [1, 2, 4, 8, 16]
    clipped = resolve(CompilationConfig(), CPU, max_num_batched_tokens=20)
    assert list(clipped.cudagraph_capture_sizes) == [1, 2, 4, 8, 16]
    capped = resolve(CompilationConfig(max_cudagraph_capture_size=40), CPU)
    assert list(capped.cudagraph_capture_sizes) == [1, 2, 4, 8, 16, 24, 32, 40]


def test_user_sizes_deduplicated_sorted_and_dropped_with_warning(caplog):
    cc = CompilationConfig(cudagraph_capture_sizes=(64, 4, 1, 4, 5000, 9000))
    with caplog.at_level(logging.WARNING, logger="vgraph.config"):
        sizes = resolve(cc, CPU, max_num_batched_tokens=512).cudagraph_capture_sizes
    assert list(sizes) == [1, 4, 64]
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 2
    assert "5000" in dropped[0] and "9000" in dropped[1] and "512" in dropped[0]


@pytest.mark.parametrize("triton", [True, False])
def test_use_inductor_resolves_by_device_and_triton(triton, monkeypatch, caplog):
    import torch.utils._triton

    monkeypatch.setattr(torch.utils._triton, "has_triton", lambda: triton)
    assert resolve(CompilationConfig(), CPU).use_inductor is False
    assert resolve(CompilationConfig(use_inductor=True), CPU).use_inductor is True
    assert resolve(CompilationConfig(use_inductor=False), CUDA).use_inductor is False
    with caplog.at_level(logging.WARNING, logger="vgraph.config"):
        assert resolve(CompilationConfig(), CUDA).use_inductor is triton
    assert ("Triton is not installed" in caplog.text) is not triton
    if triton:
        assert resolve(CompilationConfig(use_inductor=True), CUDA).use_inductor
    else:
        with pytest.raises(ValueError, match="use_inductor=true needs Triton"):
            resolve(CompilationConfig(use_inductor=True), CUDA)


def test_mode_with_graphs_needs_a_capture_size():
    cc = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL, cudagraph_capture_sizes=(64,))
    with pytest.raises(ValueError, match="needs at least one of cudagraph_capture_sizes.*=16"):
        resolve(cc, CPU, max_num_batched_tokens=16)
    pw = CompilationConfig(
        cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
        cudagraph_capture_sizes=(1, 2),
        piecewise_capture_sizes=(64,),
    )
    with pytest.raises(ValueError, match="needs at least one of piecewise_capture_sizes"):
        resolve(pw, CPU, max_num_batched_tokens=16)
    empty = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL, cudagraph_capture_sizes=())
    with pytest.raises(ValueError, match="cudagraph_capture_sizes, which is empty"):
        resolve(empty, CPU)


def test_piecewise_sizes_default_to_the_capture_list_and_resolve_alike(caplog):
    same = resolve(CompilationConfig(cudagraph_capture_sizes=(4, 1, 2)), CPU)
    assert same.piecewise_capture_sizes == same.cudagraph_capture_sizes == (1, 2, 4)
    text = '{"cudagraph_capture_sizes": [1, 2], "piecewise_capture_sizes": [64, 8, 8, 9000]}'
    with caplog.at_level(logging.WARNING, logger="vgraph.config"):
        own = resolve(CompilationConfig.parse(text), CPU, max_num_batched_tokens=512)
    assert own.cudagraph_capture_sizes == (1, 2) and own.piecewise_capture_sizes == (8, 64)
    assert "piecewise_capture_sizes: size 9000 dropped" in caplog.text
    with pytest.raises(ValueError, match="piecewise_capture_sizes=\\[0\\]: every size"):
        CompilationConfig.parse({"piecewise_capture_sizes": [0]})


def test_an_object_built_by_hand_gets_a_dicts_checks():
    """CompilationConfig(cudagraph_mode="FULL_DECODE_ONLY") as vLLM users write it: the mode
    as text is converted, and a bad field is a ValueError as in a dict."""
    built = CompilationConfig(cudagraph_mode="full_decode_only", cudagraph_capture_sizes=(1, 2))
    parsed = CompilationConfig.parse(built)
    assert parsed.cudagraph_mode is CUDAGraphMode.FULL_DECODE_ONLY
    assert parsed.cudagraph_capture_sizes == (1, 2)
    assert CompilationConfig.parse(CompilationConfig()) == CompilationConfig()
    for bad, match in (
        (CompilationConfig(cudagraph_mode="bogus"), "cudagraph_mode='bogus' is not allowed"),
        (CompilationConfig(cudagraph_capture_sizes=(0,)), "every size must be >= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            CompilationConfig.parse(bad)
    ea = EngineArgs(model="SmolLM2-135M", compilation_config=built)
    assert ea.compilation().cudagraph_mode is CUDAGraphMode.FULL_DECODE_ONLY

"""The fused decode path on CUDA for the three shipped architectures (dummy weights, bf16): greedy
tokens of FULL graphs, with the engine core in its own process as users run it, equal NONE's
(eager, in this process), logprobs close (the sampler widens the head's bf16 logits for them), and
the model really took the fused ops (LlamaModel.fused), the final norm inside the LM head's op
(LlamaModel.norm_in_head) and where the table says so the one-kernel MLP at one token (its state),
which the in-process engine shows."""

from __future__ import annotations

import gc

import pytest
import torch

from vgraph import LLM, SamplingParams
from vgraph.models.llama import LlamaModel

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def run(
    name: str, mode: str, num_requests: int, multiprocess: bool
) -> tuple[list[list[int]], list, list[tuple[bool, bool]] | None]:
    llm = LLM(
        name,
        load_format="dummy",
        max_model_len=512,
        multiprocess=multiprocess,
        gpu_memory_utilization=0.3,
        compilation_config={
            "cudagraph_mode": mode,
            "cudagraph_capture_sizes": [1, 2, 4, 8, 16],
            "splitting_ops": [],
            "use_inductor": False,  # Inductor over the fused ops: tests/gpu/test_engine_gpu.py
        },
    )
    prompts = [list(range(1 + i, 30 + 7 * i)) for i in range(num_requests)]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=1)
    outs = llm.generate(prompts, params, use_tqdm=False)
    fused = None  # the model lives in the engine core's process
    if not multiprocess:
        model = llm.engine.client.core.runner.model
        fused = [
            (m.fused, m.norm_in_head, any(layer.mlp.mlp_state is not None for layer in m.layers))
            for m in model.modules()
            if isinstance(m, LlamaModel)
        ]
        del model
    result = [o.outputs[0].token_ids for o in outs], [o.outputs[0].logprobs for o in outs], fused
    llm.shutdown()
    del llm, outs
    gc.collect()
    torch.cuda.empty_cache()
    return result


def expected_fused(name: str) -> list[tuple[bool, bool, bool]]:
    """The model took the fused ops and the final norm in the head; its MLPs are one kernel at
    one token where the op's table says so (Llama-3.2-1B's shape)."""
    return [(True, True, name == "Llama-3.2-1B")]


# 1 request: batch 1 (Llama-3.2-1B's one-kernel MLP); 5: batch 8 (the fused kernels); 13: batch
# 16 (the token-split tensor-core kernels, Llama-3.2-1B's unfused QKV and gate/up: norm, rope and
# silu kernels between cuBLAS and attention)
@pytest.mark.parametrize("num_requests", [1, 5, 13])
@pytest.mark.parametrize("name", ["SmolLM2-135M", "Llama-3.2-1B", "Qwen3-0.6B"])
def test_full_equals_none_on_the_fused_path(name: str, num_requests: int) -> None:
    tokens_none, lps_none, fused_none = run(name, "NONE", num_requests, multiprocess=False)
    tokens_full, lps_full, _ = run(name, "FULL", num_requests, multiprocess=True)
    assert fused_none == expected_fused(name)
    assert tokens_full == tokens_none
    for steps_none, steps_full in zip(lps_none, lps_full):
        for entry_none, entry_full in zip(steps_none, steps_full):
            for token_id in entry_none.keys() & entry_full.keys():
                assert abs(entry_none[token_id].logprob - entry_full[token_id].logprob) < 0.05


@pytest.mark.parametrize("num_requests", [5, 13])
@pytest.mark.parametrize("name", ["Llama-3.2-1B", "Qwen3-0.6B"])
def test_full_equals_none_with_the_qkv_norm_folded(
    name: str, num_requests: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VGRAPH_FOLD_QKV_NORM=1 (read at load, by the engine core's own process too): the QKV op's
    unit_norm, whose unfused path (Llama-3.2-1B at 13-16 tokens, Qwen3-0.6B at 9-16) scales by
    1 / rms after cuBLAS. FULL's greedy tokens equal NONE's."""
    monkeypatch.setenv("VGRAPH_FOLD_QKV_NORM", "1")
    tokens_none, _, fused_none = run(name, "NONE", num_requests, multiprocess=False)
    tokens_full, _, _ = run(name, "FULL", num_requests, multiprocess=True)
    assert fused_none == expected_fused(name)
    assert tokens_full == tokens_none


@pytest.mark.parametrize("num_requests", [5, 13])
@pytest.mark.parametrize("name", ["Llama-3.2-1B", "Qwen3-0.6B"])
def test_full_equals_none_with_wide_packed_weights(
    name: str, num_requests: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The QKV and gate/up weights packed for the wide tensor-core GEMV (VGRAPH_WIDE_PACK, read
    at load by the engine core's own process too; by default those the wide kernel runs: in these
    models from 1-2 tokens on). FULL's greedy tokens with them equal NONE's without."""
    monkeypatch.setenv("VGRAPH_WIDE_PACK", "0")
    tokens_none, _, fused_none = run(name, "NONE", num_requests, multiprocess=False)
    monkeypatch.delenv("VGRAPH_WIDE_PACK")
    tokens_full, _, _ = run(name, "FULL", num_requests, multiprocess=True)
    assert fused_none == expected_fused(name)
    assert tokens_full == tokens_none

"""The model's fused decode path (the path CUDA takes) forced on the CPU, where the fused ops run
their CPU impls: greedy tokens of tiny Llama / Qwen2 (qkv bias) / Qwen3 (q/k norm) / tied
checkpoints still equal transformers', so the residual stream and the wiring of every op are right.
"""

from __future__ import annotations

import pytest
import torch

from tests.tiny_models import TINY, hf_greedy
from vgraph._ext import load_ext
from vgraph.models.llama import LlamaModel

pytest.importorskip("msgspec")  # the engine; absent on the GPU machine
if not (load_ext() and torch._C._dispatch_has_kernel("vgraph_C::linear_out")):
    pytest.skip("vgraph._C without the fused decode ops", allow_module_level=True)

pytestmark = pytest.mark.usefixtures("single_thread")

VARIANTS = {
    "llama": ("llama", {}),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
    "llama-tied": ("llama", {"tie_word_embeddings": True}),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_fused_path_greedy_matches_transformers(
    name: str, tiny_checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vgraph import LLM, SamplingParams

    arch, overrides = VARIANTS[name]
    folder = tiny_checkpoint(arch, **overrides)
    gen = torch.Generator().manual_seed(3)
    prompts = [
        torch.randint(0, TINY["vocab_size"], (n,), generator=gen).tolist() for n in (1, 9, 33)
    ]
    expected = hf_greedy(folder, prompts, 16)

    monkeypatch.setattr(LlamaModel, "use_fused_ops", lambda self, x: True)
    llm = LLM(str(folder), device="cpu", multiprocess=False, cpu_kv_cache_bytes=1 << 24)
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    models = [m for m in llm.engine.client.core.runner.model.modules() if isinstance(m, LlamaModel)]
    assert [m.fused for m in models] == [True]
    assert [o.outputs[0].token_ids for o in outputs] == expected


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_folded_qkv_norm_greedy_matches_transformers(
    arch: str, tiny_checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VGRAPH_FOLD_QKV_NORM=1: after loading, each layer's input norm weight (drawn
    around 1 here, so folding changes the weights) is multiplied into its QKV weight and set to
    ones, and the fused QKV op runs with unit_norm (on the CPU its unfused path: the GEMM on the
    raw residual, then each row times 1 / rms, the bias and RoPE in one pass). Greedy tokens still
    equal transformers' on the checkpoint's own weights."""
    from vgraph import LLM, SamplingParams

    folder = tiny_checkpoint(arch, norm_std=0.2)
    prompts = [[7], list(range(5, 14)), list(range(40, 73))]
    expected = hf_greedy(folder, prompts, 16)

    monkeypatch.setattr(LlamaModel, "use_fused_ops", lambda self, x: True)
    monkeypatch.setenv("VGRAPH_FOLD_QKV_NORM", "1")
    llm = LLM(str(folder), device="cpu", multiprocess=False, cpu_kv_cache_bytes=1 << 24)
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    model = llm.engine.client.core.runner.model
    for layer in model.model.layers:
        assert layer.self_attn.unit_norm
        norm_weight = layer.input_layernorm.weight
        assert torch.equal(norm_weight, torch.ones_like(norm_weight))
    assert [o.outputs[0].token_ids for o in outputs] == expected
    llm.shutdown()


def test_fold_switch_refuses_a_bad_value(tiny_checkpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    from vgraph import LLM

    monkeypatch.setenv("VGRAPH_FOLD_QKV_NORM", "yes")
    with pytest.raises(ValueError, match="VGRAPH_FOLD_QKV_NORM must be 0, 1 or auto, got 'yes'"):
        LLM(str(tiny_checkpoint("llama")), device="cpu", multiprocess=False)


def test_wide_pack_switch_refuses_a_bad_value_and_packs_only_on_sm90(
    tiny_checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VGRAPH_WIDE_PACK takes 0, 1 or auto, naming the switch otherwise; on the CPU (no wide
    kernel) VGRAPH_WIDE_PACK=1 packs nothing and the model serves as before."""
    from vgraph import LLM, SamplingParams

    monkeypatch.setenv("VGRAPH_WIDE_PACK", "on")
    with pytest.raises(ValueError, match="VGRAPH_WIDE_PACK must be 0, 1 or auto, got 'on'"):
        LLM(str(tiny_checkpoint("llama")), device="cpu", multiprocess=False)
    monkeypatch.setattr(LlamaModel, "use_fused_ops", lambda self, x: True)
    monkeypatch.setenv("VGRAPH_WIDE_PACK", "1")
    llm = LLM(str(tiny_checkpoint("llama")), device="cpu", multiprocess=False)
    model = llm.engine.client.core.runner.model
    for layer in model.model.layers:
        assert layer.self_attn.wide_packed is None and layer.mlp.wide_packed is None
        assert torch.ops.vgraph_C.wide_gemv_from(layer.mlp.gate_up_proj.weight, "gate_up") == 0
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    assert len(llm.generate([[7, 8, 9]], params, use_tqdm=False)[0].outputs[0].token_ids) == 4
    llm.shutdown()


@pytest.mark.parametrize(
    ("arch", "fused", "folded"),
    [("llama", True, True), ("qwen3", True, False), ("llama", False, False)],
)
def test_fold_by_default_where_it_paid(
    arch: str, fused: bool, folded: bool, tiny_checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default (auto) folds on the fused path of a model without q / k norms only: Qwen3's
    QKV op (q / k norms first, no RoPE in it) ran slower folded; the torch path keeps its
    weights as the checkpoint has them."""
    from vgraph import LLM

    monkeypatch.setattr(LlamaModel, "use_fused_ops", lambda self, x: fused)
    monkeypatch.delenv("VGRAPH_FOLD_QKV_NORM", raising=False)
    llm = LLM(str(tiny_checkpoint(arch)), device="cpu", multiprocess=False)
    model = llm.engine.client.core.runner.model
    assert all(layer.self_attn.unit_norm is folded for layer in model.model.layers)
    llm.shutdown()


def test_fused_head_writes_the_model_dtype_and_the_sampler_widens(
    tiny_checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fused LM head's logits are in the model's dtype (bfloat16 here); seeded top-p sampling
    and logprobs over them equal those over the head's float32 logits (the same values: the head
    rounds them to bfloat16 first), and greedy tokens too; so does seeded sampling in a batch
    with no logprobs (the sampler divides the logits by the temperature, widening none)."""
    from vgraph import LLM, SamplingParams
    from vgraph.models.llama import LlamaForCausalLM

    folder = tiny_checkpoint("llama")
    monkeypatch.setattr(LlamaModel, "use_fused_ops", lambda self, x: True)
    prompts = [[5, 9, 2], list(range(3, 20))]
    params = [
        SamplingParams(temperature=0.9, top_p=0.95, seed=11, max_tokens=8, logprobs=3),
        SamplingParams(temperature=0.0, max_tokens=8, logprobs=2),
    ]
    results = {}
    for float32_logits in (False, True):
        monkeypatch.setattr(LlamaForCausalLM, "float32_logits", float32_logits)
        llm = LLM(
            str(folder),
            device="cpu",
            dtype="bfloat16",
            multiprocess=False,
            cpu_kv_cache_bytes=1 << 24,
        )
        outs = [o.outputs[0] for o in llm.generate(prompts, params, use_tqdm=False)]
        plain = SamplingParams(temperature=0.8, top_k=40, seed=5, max_tokens=8)
        outs += [o.outputs[0] for o in llm.generate(prompts, plain, use_tqdm=False)]
        model = llm.engine.client.core.runner.model
        assert model.model.fused
        hidden = torch.randn(3, TINY["hidden_size"], dtype=torch.bfloat16)
        dtype = torch.float32 if float32_logits else torch.bfloat16
        assert model.compute_logits(hidden).dtype == dtype
        results[float32_logits] = [
            (o.token_ids, [{t: lp.logprob for t, lp in step.items()} for step in o.logprobs or []])
            for o in outs
        ]
        llm.shutdown()
    assert results[False] == results[True]
    assert len(set(results[False][0][0])) > 1  # the sampled requests really sample
    assert len(set(results[False][2][0])) > 1

"""load_format "dummy": the configs shipped in vgraph/models/configs build real architectures with
random weights. Only SmolLM2-135M is built and run here (Llama-3.2-1B would take ~5 GB in float32
on the CPU); the other two are checked as configs, as parameter shapes on the meta device, and
(Llama 3.2) as RoPE frequencies against transformers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from vgraph import LLM, SamplingParams
from vgraph.engine.arg_utils import create_engine_config
from vgraph.layers.rotary import _inv_freq, rope_parameters
from vgraph.models.registry import get_model_cls

pytestmark = pytest.mark.usefixtures("single_thread")

CONFIGS = Path(__file__).parents[2] / "vgraph" / "models" / "configs"

# name: (architecture, vocab, layers, kv heads, head_dim, max_model_len, parameters (tied))
SHIPPED = {
    "SmolLM2-135M": ("LlamaForCausalLM", 49152, 30, 3, 64, 8192, 134_515_008),
    "Llama-3.2-1B": ("LlamaForCausalLM", 128256, 16, 8, 64, 131072, 1_235_814_400),
    "Qwen3-0.6B": ("Qwen3ForCausalLM", 151936, 28, 8, 128, 40960, 596_049_920),
}


def test_every_shipped_config_is_tested() -> None:
    assert sorted(p.name for p in CONFIGS.iterdir() if p.is_dir()) == sorted(SHIPPED)


@pytest.mark.parametrize("name", list(SHIPPED))
def test_shipped_config_parses(name: str) -> None:
    arch, vocab, layers, kv_heads, head_dim, max_len, _ = SHIPPED[name]
    config = create_engine_config(name, load_format="dummy", device="cpu")
    mc = config.model_config
    assert Path(mc.model) == CONFIGS / name
    assert mc.load_format == "dummy" and mc.dtype == torch.float32
    assert (mc.architecture, mc.vocab_size, mc.num_layers) == (arch, vocab, layers)
    assert (mc.num_kv_heads, mc.head_dim, mc.max_model_len) == (kv_heads, head_dim, max_len)
    assert mc.hf_config["tie_word_embeddings"] is True


@pytest.mark.parametrize("name", list(SHIPPED))
def test_shipped_architecture_on_the_meta_device(name: str) -> None:
    """The whole model graph builds from the config, with the published parameter count."""
    arch, *_, num_params = SHIPPED[name]
    cfg = json.loads((CONFIGS / name / "config.json").read_text())
    with torch.device("meta"):
        model = get_model_cls(arch)(cfg)
    assert sum(p.numel() for p in model.parameters()) == num_params
    assert not hasattr(model, "lm_head")  # tied to the embedding


def test_llama_3_2_rope_matches_transformers() -> None:
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    path = CONFIGS / "Llama-3.2-1B" / "config.json"
    theta, scaling = rope_parameters(json.loads(path.read_text()))
    assert theta == 500000.0 and scaling["rope_type"] == "llama3" and scaling["factor"] == 32.0
    hf_config = transformers.LlamaConfig(**json.loads(path.read_text()))
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_config, "cpu")
    torch.testing.assert_close(_inv_freq(64, theta, scaling), expected, rtol=0, atol=0)


def test_qwen3_has_plain_rope() -> None:
    theta, scaling = rope_parameters(
        json.loads((CONFIGS / "Qwen3-0.6B" / "config.json").read_text())
    )
    assert theta == 1_000_000.0 and scaling is None


@pytest.fixture(scope="module")
def smollm2() -> Iterator[LLM]:
    llm = LLM(
        "SmolLM2-135M",
        load_format="dummy",
        multiprocess=False,
        cpu_kv_cache_bytes=1 << 24,
        max_model_len=256,
    )
    yield llm
    llm.shutdown()


def test_smollm2_dummy_generates_from_token_ids(smollm2: LLM) -> None:
    assert smollm2.tokenizer is None  # a shipped config has no tokenizer: token ids only
    prompts = [[1, 2, 3, 4, 5], list(range(100, 140))]
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    outs = smollm2.generate(prompts, params, use_tqdm=False)
    for out in outs:
        c = out.outputs[0]
        assert len(c.token_ids) == 4 and c.finish_reason == "length" and c.text == ""
        assert all(0 <= t < 49152 for t in c.token_ids)
    # random weights, but seeded: the same tokens again, alone or batched
    again = smollm2.generate(prompts[1], params, use_tqdm=False)[0].outputs[0].token_ids
    assert again == outs[1].outputs[0].token_ids

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

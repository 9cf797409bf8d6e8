"""Greedy decoding of tiny random Llama / Qwen2 / Qwen3 checkpoints equals transformers, token for
token (CPU, float32), with prompts of different lengths generated in one batch."""

from __future__ import annotations

import pytest
import torch

from tests.tiny_models import TINY, hf_greedy
from vgraph import LLM, SamplingParams

pytestmark = pytest.mark.usefixtures("single_thread")

# lengths: a single token, within one block, exactly one block (16), across blocks, several blocks
PROMPT_LENS = (1, 7, 16, 29, 64)
NEW_TOKENS = 32
SMALL_KV_BYTES = 1 << 24  # thousands of blocks for a tiny model; no second spent zeroing 1 GiB

VARIANTS = {
    "llama": ("llama", {}),  # llama3 rope scaling (tiny_models sets it for llama)
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
    "llama-tied": ("llama", {"tie_word_embeddings": True}),
}


def random_prompts(lens: tuple[int, ...], vocab: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lens]


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request: pytest.FixtureRequest, tiny_checkpoint) -> tuple[str, object]:
    arch, overrides = VARIANTS[request.param]
    return request.param, tiny_checkpoint(arch, **overrides)


def test_greedy_matches_transformers(variant: tuple[str, object]) -> None:
    name, folder = variant
    prompts = random_prompts(PROMPT_LENS, TINY["vocab_size"], seed=len(name))
    expected = hf_greedy(folder, prompts, NEW_TOKENS)

    llm = LLM(str(folder), multiprocess=False, cpu_kv_cache_bytes=SMALL_KV_BYTES)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate(prompts, params, use_tqdm=False)

    assert [o.prompt_token_ids for o in outputs] == prompts
    for i, (out, ref) in enumerate(zip(outputs, expected)):
        got = out.outputs[0].token_ids
        first_diff = next((j for j, (a, b) in enumerate(zip(got, ref)) if a != b), None)
        assert got == ref, (
            f"{name} prompt {i} (len {len(prompts[i])}) differs at token {first_diff}"
        )
        assert out.outputs[0].finish_reason == "length"
    # the random model must not be degenerate, or equality would prove little
    assert len({t for o in outputs for t in o.outputs[0].token_ids}) > 8


def test_tied_checkpoint_has_no_lm_head(tiny_checkpoint) -> None:
    """The tied variant really is tied: its checkpoint stores no lm_head tensor."""
    from safetensors import safe_open

    folder = tiny_checkpoint("llama", tie_word_embeddings=True)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert "lm_head.weight" not in set(f.keys())

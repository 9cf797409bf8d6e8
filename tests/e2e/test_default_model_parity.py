"""The built-in default model (SmolLM2-135M-Instruct) against transformers on the same weights:
greedy tokens equal, CPU float32, prompts of different lengths generated in one batch."""

from __future__ import annotations

import pytest

from tests.tiny_models import hf_greedy
from vgraph import LLM, SamplingParams
from vgraph.models.default_model import ensure_default_model

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers and explain why each is prime. Be brief but precise, please.",
    "Hi",
    "Translate to French: the cat sleeps on the warm windowsill while the rain falls outside.",
]


@pytest.fixture(scope="module")
def model_dir():
    return ensure_default_model()


@pytest.fixture(scope="module")
def llm(model_dir):
    return LLM(model_dir, dtype="float32", max_model_len=1024)


def chat_ids(tokenizer, text):
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )


def test_greedy_tokens_match_transformers(model_dir, llm):
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    prompts = [chat_ids(tok, p) for p in PROMPTS]
    assert len({len(p) for p in prompts}) == len(prompts)  # different lengths
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    ours = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]

    assert ours == hf_greedy(model_dir, prompts, 32)


def test_chat_answers_the_capital_question(llm):
    out = llm.chat(
        [{"role": "user", "content": "What is the capital of France?"}],
        SamplingParams(temperature=0, max_tokens=16),
        use_tqdm=False,
    )
    assert out[0].outputs[0].text.strip() == "The capital of France is Paris."
    assert out[0].outputs[0].finish_reason == "stop"

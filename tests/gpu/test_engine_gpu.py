"""The engine on CUDA in bfloat16: transformers agreement, real architectures (dummy weights),
FULL graphs against NONE, and capture of the default capture list.

bf16 rounding differs between our kernels and transformers', so agreement is on logprobs (close)
and on greedy tokens only where the reference's top two are not a near tie.
"""

from __future__ import annotations

import gc
import random

import pytest
import torch

from tests.tiny_models import make_tiny_model
from vgraph import LLM, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

LOGPROB_ATOL = 0.15  # bf16 logits of a tiny random model


@pytest.fixture(autouse=True)
def release_engines():
    """Engines of earlier tests (kept alive by reference cycles) must not hold GPU memory."""
    gc.collect()
    torch.cuda.empty_cache()
    yield
    gc.collect()
    torch.cuda.empty_cache()


def prompts(n: int = 4, vocab: int = 512) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(vocab) for _ in range(length)] for length in (5, 23, 41, 12)[:n]]


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def tiny(request, tmp_path_factory):
    """head_dim 64: a size the csrc CUDA kernels (the default backend on CUDA) support."""
    return str(
        make_tiny_model(
            request.param,
            tmp_path_factory.mktemp(request.param),
            hidden_size=256,
            num_attention_heads=4,
            head_dim=64,
        )
    )


def hf_logprobs(folder: str, seq: list[int]) -> torch.Tensor:
    """[len(seq), vocab] log-softmax of transformers' bf16 forward on CUDA."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    model = model.cuda().eval()
    with torch.no_grad():
        logits = model(torch.tensor([seq], device="cuda")).logits[0]
    return logits.float().log_softmax(-1).cpu()


def test_tiny_models_logprobs_close_to_transformers(tiny):
    llm = LLM(
        tiny,
        dtype="bfloat16",
        max_model_len=256,
        multiprocess=False,
        enforce_eager=True,
        gpu_memory_utilization=0.25,
    )
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=5)
    for prompt, out in zip(prompts(), llm.generate(prompts(), params, use_tqdm=False)):
        comp = out.outputs[0]
        ref = hf_logprobs(tiny, prompt + comp.token_ids)
        for step, entry in enumerate(comp.logprobs):
            row = ref[len(prompt) - 1 + step]
            for token_id, lp in entry.items():
                assert abs(lp.logprob - row[token_id].item()) < LOGPROB_ATOL


def test_full_graphs_equal_none_bf16(tiny):
    runs = {}
    for mode in ("NONE", "FULL_DECODE_ONLY", "FULL"):
        llm = LLM(
            tiny,
            dtype="bfloat16",
            max_model_len=256,
            multiprocess=False,
            gpu_memory_utilization=0.25,
            max_num_batched_tokens=32,  # chunked prefills mix with decodes
            compilation_config={
                "cudagraph_mode": mode,
                "splitting_ops": [],
                "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32],
            },
        )
        params = [
            SamplingParams(temperature=0, max_tokens=m, ignore_eos=True, logprobs=1)
            for m in (6, 14, 9, 20)
        ]
        outs = llm.generate(prompts(), params, use_tqdm=False)
        runner = llm.engine.client.core.runner
        runs[mode] = (
            [o.outputs[0].token_ids for o in outs],
            runner.graph_stats,
            [o.outputs[0].logprobs for o in outs],
        )
        del llm, runner, outs
        gc.collect()
        torch.cuda.empty_cache()
    tokens_none = runs["NONE"][0]
    assert runs["FULL_DECODE_ONLY"][0] == tokens_none
    assert runs["FULL_DECODE_ONLY"][1].steps["FULL"] > 0
    # FULL: with the csrc backend (support ALWAYS) mixed steps replay full graphs too
    assert runs["FULL"][0] == tokens_none
    assert runs["FULL"][1].steps["FULL"] > runs["FULL_DECODE_ONLY"][1].steps["FULL"]
    for steps_none, steps_full in zip(runs["NONE"][2], runs["FULL"][2]):
        for entry_none, entry_full in zip(steps_none, steps_full):
            for token_id in entry_none.keys() & entry_full.keys():
                assert abs(entry_none[token_id].logprob - entry_full[token_id].logprob) < 0.05


@pytest.mark.parametrize("name", ["Llama-3.2-1B", "Qwen3-0.6B", "SmolLM2-135M"])
def test_real_architectures_generate_with_dummy_weights(name):
    llm = LLM(
        name,
        load_format="dummy",
        max_model_len=1024,
        multiprocess=False,
        enforce_eager=True,
        gpu_memory_utilization=0.25,
    )
    out = llm.generate(
        [list(range(1, 40))],
        SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
        use_tqdm=False,
    )
    assert len(out[0].outputs[0].token_ids) == 8


def test_capture_default_list_llama_1b(capsys):
    llm = LLM(
        "Llama-3.2-1B",
        load_format="dummy",
        max_model_len=2048,
        multiprocess=False,
        gpu_memory_utilization=0.25,
        compilation_config={"cudagraph_mode": "FULL"},
    )
    runner = llm.engine.client.core.runner
    sizes = llm.config.compilation_config.cudagraph_capture_sizes
    c = runner.graph_stats
    assert list(sizes) == [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert c.num_graphs == len(runner.dispatcher.capture_keys()) > len(sizes)
    assert c.graph_memory_bytes > 0
    with capsys.disabled():
        print(
            f"\nLlama-3.2-1B default capture list: {c.num_graphs} graphs "
            f"({llm.config.attention_backend}), {c.capture_seconds:.1f} s, "
            f"{c.graph_memory_bytes / 2**20:.1f} MiB"
        )
    out = llm.generate(
        [list(range(1, 30))] * 3,
        SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
        use_tqdm=False,
    )
    assert all(len(o.outputs[0].token_ids) == 4 for o in out)


def test_engines_in_one_process_each_get_their_share():
    """gpu_memory_utilization is per engine, as vLLM's: a second live engine sizes its KV cache
    from its own weights and activations, not the first engine's memory."""
    kwargs = dict(
        load_format="dummy",
        max_model_len=1024,
        multiprocess=False,
        enforce_eager=True,
        gpu_memory_utilization=0.3,
    )
    first = LLM("SmolLM2-135M", **kwargs)
    second = LLM("SmolLM2-135M", **kwargs)
    try:
        blocks = [llm.engine.client.core.runner.num_blocks for llm in (first, second)]
        assert abs(blocks[0] - blocks[1]) <= 0.02 * blocks[0], blocks
        runner = first.engine.client.core.runner
        kv_bytes = sum(t.numel() * t.element_size() for t in runner.kv_caches.values())
        total = torch.cuda.mem_get_info()[1]
        assert 0.2 * total < kv_bytes < 0.3 * total  # the share less weights and activations
        params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
        for llm in (first, second):
            out = llm.generate([list(range(1, 20))], params, use_tqdm=False)
            assert len(out[0].outputs[0].token_ids) == 4
    finally:
        first.shutdown()
        second.shutdown()

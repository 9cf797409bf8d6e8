"""Sampling parameters through the whole offline engine: n, seeds, logprobs, stop strings, stop
token ids, EOS, min_tokens, max_tokens, ignore_eos, and incremental detokenization.

A tiny random Llama with the real tokenizer's vocabulary (conftest.text_model_dir) stands in for a
real model: its greedy text is random words, which is all these tests need. Expected results come
from an unconstrained greedy run, from the tokenizer itself, and from transformers (logprobs).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from vgraph import LLM, SamplingParams
from vgraph.engine.detokenizer import IncrementalDetokenizer
from vgraph.engine.output_processor import OutputKind
from vgraph.outputs import CompletionOutput

pytestmark = pytest.mark.usefixtures("single_thread")

SMALL_KV_BYTES = 1 << 24
PROMPTS = ["Hello, my name is", "The capital of France is", "x"]
REF_TOKENS = 40


def greedy(max_tokens: int = REF_TOKENS, **kw: Any) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


def make_llm(folder: Path, **kwargs: Any) -> LLM:
    return LLM(str(folder), multiprocess=False, cpu_kv_cache_bytes=SMALL_KV_BYTES, **kwargs)


def complete(llm: LLM, prompt: str | list[int], params: SamplingParams) -> CompletionOutput:
    return llm.generate(prompt, params, use_tqdm=False)[0].outputs[0]


@pytest.fixture(scope="module", params=[False, True], ids=["sync", "async"])
def llm(text_model_dir: Path, request: pytest.FixtureRequest) -> Iterator[LLM]:
    """Every test runs with synchronous and with async scheduling (steps launched before the
    previous step's tokens are back: stops, min_tokens and seeds must not notice)."""
    llm = make_llm(text_model_dir, async_scheduling=request.param)
    yield llm
    llm.shutdown()


@pytest.fixture(scope="module")
def tok(llm: LLM) -> Any:
    return llm.tokenizer


@pytest.fixture(scope="module")
def reference(llm: LLM) -> list[CompletionOutput]:
    """Unconstrained greedy continuations (EOS ignored) of PROMPTS."""
    outs = llm.generate(PROMPTS, greedy(ignore_eos=True), use_tqdm=False)
    refs = [o.outputs[0] for o in outs]
    assert all(len(r.token_ids) == REF_TOKENS and len(r.text) > 40 for r in refs)
    return refs


def first_new_token(ids: list[int], start: int = 3) -> int:
    """The first position >= start whose token did not occur before it."""
    return next(k for k in range(start, len(ids)) if ids[k] not in ids[:k])


# ---- n, seeds -------------------------------------------------------------------------------


def test_n_gives_n_outputs(llm: LLM) -> None:
    params = SamplingParams(n=3, temperature=1.0, seed=11, max_tokens=8, ignore_eos=True)
    [out] = llm.generate(PROMPTS[0], params, use_tqdm=False)
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert all(len(c.token_ids) == 8 and c.finish_reason == "length" for c in out.outputs)
    assert len({tuple(c.token_ids) for c in out.outputs}) == 3
    [again] = llm.generate(PROMPTS[0], params, use_tqdm=False)  # seeded: reproducible
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in out.outputs]
    [two] = llm.generate(PROMPTS[0], greedy(6, n=2), use_tqdm=False)
    assert len(two.outputs) == 2 and two.outputs[0].token_ids == two.outputs[1].token_ids


def test_seed_reproducible_alone_and_in_a_batch(llm: LLM) -> None:
    seeded = SamplingParams(temperature=1.0, seed=1234, max_tokens=12, ignore_eos=True)
    alone = complete(llm, PROMPTS[1], seeded).token_ids
    outs = llm.generate(
        [PROMPTS[0], PROMPTS[1], PROMPTS[2], PROMPTS[1]],
        [
            SamplingParams(temperature=1.0, max_tokens=20),
            seeded,
            greedy(5),
            SamplingParams(temperature=1.0, seed=4321, max_tokens=12, ignore_eos=True),
        ],
        use_tqdm=False,
    )
    assert outs[1].outputs[0].token_ids == alone
    assert outs[3].outputs[0].token_ids != alone


# ---- logprobs -------------------------------------------------------------------------------


def test_logprobs_match_transformers(tiny_checkpoint) -> None:
    import transformers

    folder = tiny_checkpoint("llama")
    llm = make_llm(folder)
    prompt = list(range(100, 110))
    out = complete(llm, prompt, greedy(8, logprobs=3, ignore_eos=True))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + out.token_ids[:-1]])).logits[0, len(prompt) - 1 :]
    ref = torch.log_softmax(logits.float(), dim=-1)  # [8, vocab]

    assert len(out.logprobs) == 8
    for i, (token, entry) in enumerate(zip(out.token_ids, out.logprobs)):
        top_ids = ref[i].topk(3).indices
        assert token == top_ids[0]  # greedy
        assert list(entry) == top_ids.tolist()  # sampled (= top-1) first, then the top-3
        assert [lp.rank for lp in entry.values()] == [1, 2, 3]
        for tid, lp in entry.items():
            assert lp.logprob == pytest.approx(ref[i, tid].item(), abs=1e-4)
            assert lp.decoded_token is None  # no tokenizer in this folder
    assert out.cumulative_logprob == pytest.approx(
        sum(e[t].logprob for t, e in zip(out.token_ids, out.logprobs)), abs=1e-5
    )


def test_logprobs_of_sampled_tokens_and_decoded_text(llm: LLM, tok: Any) -> None:
    params = SamplingParams(temperature=1.5, seed=3, max_tokens=16, logprobs=2, ignore_eos=True)
    out = complete(llm, PROMPTS[0], params)
    assert len(out.logprobs) == 16
    left_top = 0
    for token, entry in zip(out.token_ids, out.logprobs):
        first = next(iter(entry))
        assert first == token  # the sampled token comes first
        ranked = sorted(entry.values(), key=lambda lp: lp.rank)
        assert [lp.rank for lp in ranked][:2] == [1, 2] or entry[token].rank <= 2
        assert ranked[0].logprob >= ranked[1].logprob
        assert all(lp.logprob <= 0.0 for lp in entry.values())
        assert all(lp.decoded_token == tok.decode([t]) for t, lp in entry.items())
        if entry[token].rank > 2:
            assert len(entry) == 3  # sampled + top-2
            left_top += 1
    assert left_top > 0  # T=1.5 on a random model samples outside the top-2 sometimes


def test_no_logprobs_unless_asked(llm: LLM) -> None:
    out = complete(llm, PROMPTS[0], greedy(4))
    assert out.logprobs is None and out.cumulative_logprob is None


# ---- max_tokens, stop strings, stop token ids --------------------------------------------------


def test_max_tokens(llm: LLM, reference: list[CompletionOutput]) -> None:
    out = complete(llm, PROMPTS[0], greedy(5, ignore_eos=True))
    assert out.token_ids == reference[0].token_ids[:5]
    assert out.finish_reason == "length" and out.stop_reason is None


@pytest.mark.parametrize("include", [False, True], ids=["stop-excluded", "stop-included"])
def test_stop_string_truncates_text(
    llm: LLM, reference: list[CompletionOutput], include: bool
) -> None:
    full = reference[0].text
    stop = full[len(full) // 3 :][:4]  # some 4 characters from the middle of the text
    at = full.index(stop)
    out = complete(
        llm, PROMPTS[0], greedy(ignore_eos=True, stop=[stop], include_stop_str_in_output=include)
    )
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert out.text == (full[: at + len(stop)] if include else full[:at])
    ids = out.token_ids
    assert 0 < len(ids) < REF_TOKENS and ids == reference[0].token_ids[: len(ids)]


def test_earliest_stop_string_wins(llm: LLM, reference: list[CompletionOutput]) -> None:
    full = reference[1].text
    early, late = full[len(full) // 4 :][:3], full[3 * len(full) // 4 :][:4]
    assert late not in full[: full.index(early) + 3]  # the late one cannot be completed first
    out = complete(llm, PROMPTS[1], greedy(ignore_eos=True, stop=[late, early]))
    assert out.stop_reason == early and out.text == full[: full.index(early)]


def test_stop_string_never_seen_runs_to_max_tokens(
    llm: LLM, reference: list[CompletionOutput]
) -> None:
    out = complete(llm, PROMPTS[0], greedy(ignore_eos=True, stop=["\x00never\x00"]))
    assert out.token_ids == reference[0].token_ids and out.text == reference[0].text
    assert out.finish_reason == "length"


def test_stop_token_ids(llm: LLM, tok: Any, reference: list[CompletionOutput]) -> None:
    ref = reference[0].token_ids
    k = first_new_token(ref)
    out = complete(llm, PROMPTS[0], greedy(stop_token_ids=[ref[k]]))
    assert out.token_ids == ref[: k + 1]  # the stop token is returned in the ids ...
    assert out.finish_reason == "stop" and out.stop_reason == ref[k]
    assert out.text == tok.decode(ref[:k], skip_special_tokens=True)  # ... not in the text
    out = complete(
        llm, PROMPTS[0], greedy(stop_token_ids=[ref[k]], include_stop_str_in_output=True)
    )
    assert out.text == tok.decode(ref[: k + 1], skip_special_tokens=True)


def test_min_tokens_defers_stop_strings_and_stop_tokens(
    llm: LLM, reference: list[CompletionOutput]
) -> None:
    ref = reference[0].token_ids
    k = first_new_token(ref)
    out = complete(llm, PROMPTS[0], greedy(stop_token_ids=[ref[k]], min_tokens=k))
    assert out.token_ids == ref[: k + 1] and out.finish_reason == "stop"  # k outputs: allowed
    out = complete(
        llm, PROMPTS[0], greedy(stop_token_ids=[ref[k]], min_tokens=k + 2, ignore_eos=True)
    )
    # the stop token may not even be sampled before min_tokens (vLLM's semantics)
    assert out.token_ids[:k] == ref[:k] and out.token_ids[k] != ref[k]
    assert len(out.token_ids) >= k + 2 and ref[k] not in out.token_ids[: k + 2]
    # a stop string inside the text of the first min_tokens tokens does not stop the request
    early_text = reference[0].text[:8]
    stop = early_text[2:6]
    out = complete(llm, PROMPTS[0], greedy(ignore_eos=True, stop=[stop], min_tokens=REF_TOKENS))
    assert out.finish_reason == "length" and out.token_ids == ref


# ---- EOS and ignore_eos ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def eos_llm(
    text_model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    reference: list[CompletionOutput],
) -> Iterator[tuple[LLM, int]]:
    """The same model with one of its greedy tokens (position k) declared an EOS token."""
    ref = reference[0].token_ids
    k = first_new_token(ref)
    folder = tmp_path_factory.mktemp("eos-model")
    for f in text_model_dir.iterdir():
        if f.name != "generation_config.json":
            os.symlink(f, folder / f.name)
    cfg = json.loads((text_model_dir / "config.json").read_text())
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [cfg["eos_token_id"], ref[k]]})
    )
    llm = make_llm(folder)
    yield llm, k
    llm.shutdown()


def test_eos_stops_and_ignore_eos_does_not(
    eos_llm: tuple[LLM, int], tok: Any, reference: list[CompletionOutput]
) -> None:
    llm, k = eos_llm
    ref = reference[0].token_ids
    out = complete(llm, PROMPTS[0], greedy())
    assert out.token_ids == ref[: k + 1]
    assert out.finish_reason == "stop" and out.stop_reason is None
    assert out.text == tok.decode(ref[:k], skip_special_tokens=True)
    out = complete(llm, PROMPTS[0], greedy(ignore_eos=True))
    assert out.token_ids == ref and out.finish_reason == "length"
    out = complete(llm, PROMPTS[0], greedy(min_tokens=k + 2))
    assert out.token_ids[:k] == ref[:k] and ref[k] not in out.token_ids[: k + 2]
    assert len(out.token_ids) >= k + 2


# ---- incremental detokenization ----------------------------------------------------------------


def test_output_text_equals_decode_of_the_ids(llm: LLM, tok: Any) -> None:
    outs = []
    for seed in range(4):
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=24, ignore_eos=True)
        outs += llm.generate(PROMPTS, params, use_tqdm=False)
    for o in outs:
        c = o.outputs[0]
        assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)


TEXT = "Héllo wörld! 你好，世界 🎉🚀 naïve café — ‘quotes’ and emoji 👩‍👩‍👧 done."


def test_detokenizer_token_by_token_on_multibyte_text(tok: Any) -> None:
    ids = tok.encode(TEXT, add_special_tokens=False)
    prompt = tok.encode("Say this: ", add_special_tokens=False)
    detok = IncrementalDetokenizer(tok.backend_tokenizer, prompt, SamplingParams())
    for t in ids:
        assert detok.update([t]) is None
        assert TEXT.startswith(detok.output_text)  # partial characters are held, never garbled
    assert detok.output_text == TEXT == tok.decode(ids)


def test_detokenizer_stop_string_across_tokens(tok: Any) -> None:
    text = "The quick brown fox jumps over the lazy dog, then the fox sleeps."
    ids = tok.encode(text, add_special_tokens=False)
    for include, expected in ((False, "The quick brown "), (True, "The quick brown fox ju")):
        params = SamplingParams(stop=["fox ju", "zzz"], include_stop_str_in_output=include)
        detok = IncrementalDetokenizer(tok.backend_tokenizer, [], params)
        stop = next(s for s in (detok.update([t]) for t in ids) if s is not None)
        assert stop == "fox ju"
        assert detok.output_text == expected


def test_streamed_deltas_add_up_and_never_show_a_stop_string(
    llm: LLM, reference: list[CompletionOutput]
) -> None:
    full = reference[0].text
    stop = full[len(full) // 2 :][:5]
    engine = llm.engine
    engine.add_request(
        "stream-1", PROMPTS[0], greedy(ignore_eos=True, stop=[stop]), OutputKind.DELTA
    )
    engine.add_request("stream-2", PROMPTS[0], greedy(ignore_eos=True), OutputKind.DELTA)
    texts: dict[str, list[str]] = {"stream-1": [], "stream-2": []}
    ids: dict[str, list[int]] = {"stream-1": [], "stream-2": []}
    while engine.has_unfinished_requests():
        for out in engine.step():
            for c in out.outputs:
                texts[out.request_id].append(c.text)
                ids[out.request_id] += c.token_ids
    assert "".join(texts["stream-2"]) == full
    assert ids["stream-2"] == reference[0].token_ids
    assert "".join(texts["stream-1"]) == full[: full.index(stop)]
    assert len(texts["stream-1"]) > 3  # it really streamed
    streamed = ""
    for delta in texts["stream-1"]:
        streamed += delta
        assert stop not in streamed

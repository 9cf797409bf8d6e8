"""Every bad input raises ValueError naming the field, the value and what is allowed, before
anything is queued; the engine then goes on serving good requests as if nothing happened."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vgraph import LLM, SamplingParams

pytestmark = pytest.mark.usefixtures("single_thread")

SMALL_KV_BYTES = 1 << 24
MAX_MODEL_LEN = 64
GOOD_PROMPTS = ["Hello, my name is", [5, 6, 7, 8]]
GOOD_PARAMS = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(text_model_dir: Path) -> Iterator[LLM]:
    llm = LLM(
        str(text_model_dir),
        multiprocess=False,
        cpu_kv_cache_bytes=SMALL_KV_BYTES,
        max_model_len=MAX_MODEL_LEN,
    )
    yield llm
    llm.shutdown()


@pytest.fixture(scope="module")
def good_outputs(llm: LLM) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(GOOD_PROMPTS, GOOD_PARAMS, use_tqdm=False)]


def assert_message(err: pytest.ExceptionInfo[ValueError], *parts: str) -> None:
    msg = str(err.value)
    for part in parts:
        assert part in msg, f"{part!r} not in the message {msg!r}"


def assert_nothing_queued_and_still_serving(llm: LLM, good_outputs: list[list[int]]) -> None:
    assert not llm.engine.has_unfinished_requests()
    scheduler = llm.engine.client.core.scheduler
    assert not scheduler.requests and not scheduler.waiting and not scheduler.running
    outs = llm.generate(GOOD_PROMPTS, GOOD_PARAMS, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == good_outputs


# ---- sampling params --------------------------------------------------------------------------

BAD_PARAMS = [
    # (kwargs, field, value as printed, what is allowed)
    ({"temperature": -0.5}, "temperature", "-0.5", ">= 0"),
    ({"top_p": 0.0}, "top_p", "0.0", "(0, 1]"),
    ({"top_p": 1.5}, "top_p", "1.5", "(0, 1]"),
    ({"top_k": -2}, "top_k", "-2", "0 or -1 (disabled), or >= 1"),
    ({"max_tokens": 0}, "max_tokens", "0", ">= 1"),
    ({"n": 0}, "n", "0", ">= 1"),
    ({"logprobs": 21}, "logprobs", "21", "[0, 20]"),
    ({"min_p": 1.5}, "min_p", "1.5", "[0, 1]"),
    ({"min_tokens": 5, "max_tokens": 4}, "min_tokens", "5", "max_tokens=4"),
    ({"stop": [""]}, "stop", "['']", "non-empty strings"),
    ({"stop_token_ids": [-3]}, "stop_token_ids", "[-3]", ">= 0"),
    ({"seed": -1}, "seed", "-1", "[0, 2**63)"),
    ({"temperature": "0.5"}, "temperature", "'0.5'", "a number"),
    ({"max_tokens": 2.5}, "max_tokens", "2.5", "an integer"),
    ({"top_k": None}, "top_k", "None", "an integer"),
]


@pytest.mark.parametrize(
    "kwargs, field, value, allowed",
    BAD_PARAMS,
    ids=[f"{k}={v}" for kw, *_ in BAD_PARAMS for k, v in list(kw.items())[:1]],
)
def test_bad_sampling_params(
    llm: LLM,
    good_outputs: list[list[int]],
    kwargs: dict[str, Any],
    field: str,
    value: str,
    allowed: str,
) -> None:
    with pytest.raises(ValueError) as err:
        llm.generate(GOOD_PROMPTS, SamplingParams(**kwargs), use_tqdm=False)
    assert_message(err, f"{field}={value}", allowed)
    assert_nothing_queued_and_still_serving(llm, good_outputs)


# ---- prompts ----------------------------------------------------------------------------------

V = "{vocab}"  # the vocabulary size, filled in by the test
BAD_PROMPTS = [
    # (prompt, what the message must say)
    ("", ["prompt=''", "empty", "at least one"]),
    ([], ["prompt=[]", "empty", "at least one token id"]),
    ([7] * (MAX_MODEL_LEN + 1), [f"{MAX_MODEL_LEN + 1} tokens", f"max_model_len={MAX_MODEL_LEN}"]),
    ("word " * 200, ["tokens", f"max_model_len={MAX_MODEL_LEN}"]),
    ([5, -1, 6], ["token id -1", "0..{last}"]),
    ([5, V, 6], ["token id {vocab}", "0..{last}"]),
    ([5, 2.5], ["token id 2.5", "0..{last}"]),
    (42, ["prompt of type int", "str or a list of ints"]),
    ({"prompt": "Hi", "cache_salt": ""}, ["'cache_salt'", "non-empty string", "''"]),
    ({"prompt_token_ids": [5], "cache_salt": "a/b"}, ["'cache_salt'", "at most 128", "'a/b'"]),
    ({"prompt": "Hi", "salt": "x"}, ["'salt'", 'no other key but "cache_salt"']),
]


@pytest.mark.parametrize(
    "prompt, parts",
    BAD_PROMPTS,
    ids=[
        "empty-str",
        "empty-list",
        "too-long-ids",
        "too-long-text",
        "negative-id",
        "id-vocab-size",
        "float-id",
        "int",
        "empty-cache-salt",
        "cache-salt-with-slash",
        "unknown-dict-key",
    ],
)
def test_bad_prompt(llm: LLM, good_outputs: list[list[int]], prompt: Any, parts: list[str]) -> None:
    vocab = llm.config.model_config.vocab_size
    if isinstance(prompt, list):
        prompt = [vocab if t == V else t for t in prompt]
    with pytest.raises(ValueError) as err:
        llm.generate([GOOD_PROMPTS[0], prompt], GOOD_PARAMS, use_tqdm=False)  # the good one too
    assert_message(err, *(p.format(vocab=vocab, last=vocab - 1) for p in parts))
    assert_nothing_queued_and_still_serving(llm, good_outputs)


def test_prompt_of_exactly_max_model_len_is_served(llm: LLM) -> None:
    out = llm.generate([[7] * MAX_MODEL_LEN], GOOD_PARAMS, use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 1 and out.finish_reason == "length"


def test_bad_params_entry_after_good_ones_queues_nothing(
    llm: LLM, good_outputs: list[list[int]]
) -> None:
    """The second entry's token id is checked against the vocabulary only as it is queued: the
    first prompt's request, queued by then, is taken back."""
    bad = SamplingParams(max_tokens=200, ignore_eos=True, stop_token_ids=[10**6])
    with pytest.raises(ValueError) as err:
        llm.generate(GOOD_PROMPTS, [GOOD_PARAMS, bad], use_tqdm=False)
    assert_message(err, "stop_token_ids", "1000000")
    assert_nothing_queued_and_still_serving(llm, good_outputs)


def test_sampling_params_list_of_the_wrong_length(llm: LLM, good_outputs: list[list[int]]) -> None:
    with pytest.raises(ValueError) as err:
        llm.generate(GOOD_PROMPTS, [GOOD_PARAMS] * 3, use_tqdm=False)
    assert_message(err, "sampling_params has 3 entries for 2 prompts")
    assert_nothing_queued_and_still_serving(llm, good_outputs)


@pytest.mark.parametrize(
    ("prompts", "params", "parts"),
    [
        (None, None, ["prompts must be text", "got NoneType"]),
        (7, None, ["prompts must be text", "got int"]),
        (GOOD_PROMPTS, {"max_tokens": 3}, ["sampling_params must be a SamplingParams", "dict"]),
        (GOOD_PROMPTS, "greedy", ["sampling_params must be a SamplingParams", "got str"]),
    ],
)
def test_prompts_and_params_of_the_wrong_type(
    llm: LLM, good_outputs: list[list[int]], prompts: object, params: object, parts: list[str]
) -> None:
    with pytest.raises(ValueError) as err:
        llm.generate(prompts, params, use_tqdm=False)
    assert_message(err, *parts)
    assert_nothing_queued_and_still_serving(llm, good_outputs)


def test_prompts_may_be_any_iterable(llm: LLM, good_outputs: list[list[int]]) -> None:
    outs = llm.generate((p for p in GOOD_PROMPTS), iter([GOOD_PARAMS] * 2), use_tqdm=False)
    assert [list(o.outputs[0].token_ids) for o in outs] == good_outputs


def test_text_prompt_without_a_tokenizer(tiny_checkpoint) -> None:
    llm = LLM(str(tiny_checkpoint("llama")), multiprocess=False, cpu_kv_cache_bytes=SMALL_KV_BYTES)
    with pytest.raises(ValueError) as err:
        llm.generate("hello", GOOD_PARAMS, use_tqdm=False)
    assert_message(err, "prompt is text", "no tokenizer", "token ids")
    assert len(llm.generate([1, 2, 3], GOOD_PARAMS, use_tqdm=False)[0].outputs[0].token_ids) == 6


# ---- model folders ----------------------------------------------------------------------------


def make_folder(tmp_path: Path, text_model_dir: Path, what: str) -> Path:
    folder = tmp_path / what
    folder.mkdir()
    if what == "no-config":
        shutil.copy(text_model_dir / "model.safetensors", folder)
    elif what == "malformed-config":
        (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"],')
    elif what == "config-lacks-key":
        cfg = json.loads((text_model_dir / "config.json").read_text())
        del cfg["num_hidden_layers"]
        (folder / "config.json").write_text(json.dumps(cfg))
    elif what == "unknown-architecture":
        cfg = json.loads((text_model_dir / "config.json").read_text())
        cfg["architectures"] = ["GPT2LMHeadModel"]
        (folder / "config.json").write_text(json.dumps(cfg))
    elif what == "no-safetensors":
        shutil.copy(text_model_dir / "config.json", folder)
    return folder


BAD_FOLDERS: list[tuple[str, Callable[[str], list[str]]]] = [
    ("missing", lambda f: [f"model={f + '-missing'!r}", "not a folder", "checkpoint folder"]),
    ("no-config", lambda f: [f"model={f!r}", "no config.json"]),
    ("malformed-config", lambda f: [f"model={f!r}", "config.json is not valid JSON"]),
    ("config-lacks-key", lambda f: [f"model={f!r}", "lacks the required key 'num_hidden_layers'"]),
    ("unknown-architecture", lambda f: ["architectures='GPT2LMHeadModel'", "LlamaForCausalLM"]),
    ("no-safetensors", lambda f: [f"model={f!r}", "no *.safetensors", "load_format='dummy'"]),
]


@pytest.mark.parametrize("what, parts", BAD_FOLDERS, ids=[w for w, _ in BAD_FOLDERS])
def test_bad_model_folder(
    tmp_path: Path, text_model_dir: Path, what: str, parts: Callable[[str], list[str]]
) -> None:
    folder = make_folder(tmp_path, text_model_dir, what)
    model = str(folder) + ("-missing" if what == "missing" else "")
    with pytest.raises(ValueError) as err:
        LLM(model, multiprocess=False, cpu_kv_cache_bytes=SMALL_KV_BYTES)
    assert_message(err, *parts(str(folder.resolve())))


def test_unknown_model_name_lists_the_shipped_configs() -> None:
    with pytest.raises(ValueError) as err:
        LLM("no-such-model", multiprocess=False)
    assert_message(
        err, "model='no-such-model'", "not a folder", "Llama-3.2-1B", "Qwen3-0.6B", "SmolLM2-135M"
    )


def test_missing_safetensors_is_fine_for_dummy_weights(
    tmp_path: Path, text_model_dir: Path
) -> None:
    folder = make_folder(tmp_path, text_model_dir, "no-safetensors")
    llm = LLM(
        str(folder), multiprocess=False, cpu_kv_cache_bytes=SMALL_KV_BYTES, load_format="dummy"
    )
    assert len(llm.generate([1, 2, 3], GOOD_PARAMS, use_tqdm=False)[0].outputs[0].token_ids) == 6


def test_bad_engine_arguments(text_model_dir: Path, tmp_path: Path) -> None:
    model = str(text_model_dir)
    cases = [
        ({"tokenizer": "/no/such/tokenizer"}, ["tokenizer='/no/such/tokenizer'", "not a folder"]),
        ({"tokenizer": str(tmp_path)}, [f"tokenizer={str(tmp_path)!r}", "tokenizer.json"]),
        ({"max_model_len": 513}, ["max_model_len=513", "1..512"]),
        ({"load_format": "pickle"}, ["load_format='pickle'", "dummy"]),
        ({"dtype": "int8"}, ["dtype='int8'", "float32"]),
        ({"block_size": 8}, ["block_size=8", "16 or 32"]),
        ({"block_size": "16"}, ["block_size='16'", "an integer"]),
        ({"max_model_len": "abc"}, ["max_model_len='abc'", "an integer or None"]),
        ({"gpu_memory_utilization": "0.5"}, ["gpu_memory_utilization='0.5'", "a number"]),
        ({"served_model_name": 5}, ["served_model_name=5", "a list of strings"]),
        ({"enforce_eager": "yes"}, ["enforce_eager='yes'", "a boolean"]),
        ({"cpu_kv_cache_bytes": 0}, ["cpu_kv_cache_bytes=0", ">= 1"]),
        ({"max_num_batched_tokens": 0}, ["max_num_batched_tokens=0", ">= 1"]),
    ]
    for kwargs, parts in cases:
        with pytest.raises(ValueError) as err:
            LLM(model, multiprocess=False, **kwargs)
        assert_message(err, *parts)


def test_engine_process_start_up_error_stays_a_value_error(
    tmp_path: Path, text_model_dir: Path
) -> None:
    """With the default multi-process client the weights are loaded in the engine process:
    its ValueError still reaches the caller as a ValueError with the same words."""
    folder = make_folder(tmp_path, text_model_dir, "no-safetensors")
    with pytest.raises(ValueError, match=re.escape("no *.safetensors")):
        LLM(str(folder), cpu_kv_cache_bytes=SMALL_KV_BYTES)

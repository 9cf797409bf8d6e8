"""The offline API's vLLM surface: prompt dicts ({"prompt": ...}, {"prompt_token_ids": [...]}),
LLM.chat with tools and chat_template_kwargs, RequestOutput.metrics, and the model's
generation_config.json as the default SamplingParams (or not, with generation_config="vllm").

One in-process LLM on the scripted tool model, which answers every prompt with TOOL_PIECES."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tiny_models import TOOL_PIECES
from vgraph import LLM, SamplingParams

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
ANSWER = "".join(TOOL_PIECES)


@pytest.fixture(scope="module")
def llm(tool_model_dir: Path, single_thread: None) -> Iterator[LLM]:
    engine = LLM(str(tool_model_dir), multiprocess=False, max_model_len=256)
    yield engine
    engine.shutdown()


def greedy() -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=8)


def test_prompt_dicts_equal_their_plain_forms(llm: LLM) -> None:
    ids = llm.tokenizer.encode("Hello there")
    plain = llm.generate(["Hello there", ids], greedy(), use_tqdm=False)
    dicts = llm.generate(
        [{"prompt": "Hello there"}, {"prompt_token_ids": ids}], greedy(), use_tqdm=False
    )
    for a, b in zip(plain, dicts):
        assert a.prompt_token_ids == b.prompt_token_ids
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert b.outputs[0].text == ANSWER
    assert dicts[0].prompt == "Hello there" and dicts[1].prompt is None
    one = llm.generate({"prompt_token_ids": ids, "prompt": "label"}, greedy(), use_tqdm=False)
    assert len(one) == 1 and one[0].prompt == "label" and one[0].prompt_token_ids == ids


@pytest.mark.parametrize(
    ("prompt", "words"),
    [
        ({"text": "hi"}, ["text", "prompt_token_ids"]),
        ({"prompt": "hi", "multi_modal_data": {}}, ["multi_modal_data"]),
        ({"prompt_token_ids": "1 2 3"}, ["prompt_token_ids", "str"]),
        ({"prompt": ["hi"]}, ["prompt", "list"]),
        ({"prompt_token_ids": [1, -4]}, ["-4", "vocabulary"]),
    ],
)
def test_bad_prompt_dict_is_a_valueerror(llm: LLM, prompt: dict, words: list[str]) -> None:
    with pytest.raises(ValueError) as e:
        llm.generate(prompt, greedy(), use_tqdm=False)
    assert all(w in str(e.value) for w in words), e.value
    assert not llm.engine.has_unfinished_requests()


def test_metrics_are_ordered_times(llm: LLM) -> None:
    out = llm.generate("Hello", greedy(), use_tqdm=False)[0]
    m = out.metrics
    assert m is not None and m.first_token_time is not None and m.finished_time is not None
    assert m.arrival_time <= m.first_token_time <= m.last_token_time <= m.finished_time


def test_chat_passes_tools_and_template_kwargs(llm: LLM) -> None:
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    out = llm.chat(
        messages, greedy(), use_tqdm=False, tools=TOOLS, chat_template_kwargs={"greeting": "Hey!"}
    )[0]
    prompt = llm.tokenizer.decode(out.prompt_token_ids)
    assert prompt.startswith("Hey!\n<|im_start|>system\n<tools>\n")
    assert json.dumps(TOOLS[0]) in prompt
    assert out.outputs[0].text == ANSWER
    plain = llm.tokenizer.decode(llm.chat(messages, greedy(), use_tqdm=False)[0].prompt_token_ids)
    assert "<tools>" not in plain and "Hey!" not in plain
    with pytest.raises(ValueError, match="chat_template_kwargs may not set tokenize"):
        llm.chat(messages, greedy(), use_tqdm=False, chat_template_kwargs={"tokenize": True})


def test_chat_takes_text_parts_and_a_template(llm: LLM, tmp_path: Path) -> None:
    """LLM.chat reads OpenAI text-part lists as /v1/chat/completions does (the parts joined), and
    chat_template (the template's text, or a file of it) replaces the tokenizer's, as in vLLM."""
    plain = [{"role": "user", "content": "Weather in Paris?"}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "Weather in "},
                                          {"type": "text", "text": "Paris?"}]}]  # fmt: skip
    want = llm.chat(plain, greedy(), use_tqdm=False)[0].prompt_token_ids
    assert llm.chat(parts, greedy(), use_tqdm=False)[0].prompt_token_ids == want
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(ValueError, match=r"content parts must be .*text"):
        llm.chat(image, greedy(), use_tqdm=False)
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    out = llm.chat(plain, greedy(), use_tqdm=False, chat_template=template)[0]
    assert llm.tokenizer.decode(out.prompt_token_ids) == "[user] Weather in Paris?\n"
    path = tmp_path / "template.jinja"
    path.write_text(template)
    from_file = llm.chat(plain, greedy(), use_tqdm=False, chat_template=str(path))[0]
    assert from_file.prompt_token_ids == out.prompt_token_ids
    with pytest.raises(ValueError, match="neither a file nor a Jinja template"):
        llm.chat(plain, greedy(), use_tqdm=False, chat_template="no-such-file.jinja")


def test_generation_config_sets_the_defaults(llm: LLM, tool_model_dir: Path) -> None:
    """generation_config.json says max_new_tokens 6: generate() without params stops there."""
    assert llm.get_default_sampling_params().max_tokens == 6
    params = llm.get_default_sampling_params()
    params.ignore_eos = True
    out = llm.generate("Hello", params, use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 6 and out.finish_reason == "length"
    assert len(llm.generate("Hello", use_tqdm=False)[0].outputs[0].token_ids) == 4  # then EOS


def test_generation_config_vllm_and_bad_values(tool_model_dir: Path, tmp_path: Path) -> None:
    from vgraph.entrypoints.generation_config import load_sampling_defaults

    assert load_sampling_defaults(tool_model_dir) == {"max_tokens": 6}
    assert load_sampling_defaults(tool_model_dir, "vllm") == {}
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "do_sample": True})
    )
    assert load_sampling_defaults(tool_model_dir, str(tmp_path)) == {
        "temperature": 0.6,
        "top_p": 0.9,
        "top_k": 20,
    }
    (tmp_path / "generation_config.json").write_text(json.dumps({"top_p": 7}))
    with pytest.raises(ValueError, match="top_p"):
        load_sampling_defaults(tool_model_dir, str(tmp_path))
    with pytest.raises(ValueError, match="generation_config='nope'"):
        load_sampling_defaults(tool_model_dir, "nope")


def test_generate_after_shutdown_says_so(tool_model_dir: Path) -> None:
    """After shutdown() a generate call (engine core in its own process) is an EngineDeadError
    that says the engine was shut down, not that its process died."""
    from vgraph.engine.client import EngineDeadError

    engine = LLM(str(tool_model_dir), max_model_len=256)
    assert engine.generate("Hello", greedy(), use_tqdm=False)[0].outputs[0].text == ANSWER
    engine.shutdown()
    with pytest.raises(EngineDeadError, match="the engine was shut down"):
        engine.generate("Hello", greedy(), use_tqdm=False)
    engine.shutdown()  # twice is fine

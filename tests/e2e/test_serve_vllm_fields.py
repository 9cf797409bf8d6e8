"""vLLM's request fields beyond OpenAI's, on a real server and through `LLM.chat`: chat prompts
tokenized without the tokenizer's own special tokens (the template writes BOS), add_special_tokens,
continue_final_message, chat echo, truncate_prompt_tokens and return_tokens_as_token_ids.

The model is a tiny Llama whose tokenizer adds a BOS to text and whose chat template writes one,
as Llama 3's do; transformers' apply_chat_template(tokenize=True) is the oracle for chat prompts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

from tests.e2e.serve_utils import ServerProcess
from tests.tiny_models import make_tiny_model_with_bos_tokenizer
from vgraph import LLM, SamplingParams

ASK = [{"role": "user", "content": "What is the capital of France?"}]
PREFILLED = [*ASK, {"role": "assistant", "content": "The capital of France is"}]
GREEDY = {"temperature": 0, "max_tokens": 5, "ignore_eos": True}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model_with_bos_tokenizer(tmp_path_factory.mktemp("tiny-bos"))


@pytest.fixture(scope="module")
def srv(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(model_dir, tmp_path_factory.mktemp("vllm-fields"))
    try:
        s.wait_healthy()
        yield s
    finally:
        s.stop()


def hf_chat_ids(model_dir: Path, messages: list[dict], **kwargs: bool) -> list[int]:
    tok = AutoTokenizer.from_pretrained(model_dir)
    return list(tok.apply_chat_template(messages, tokenize=True, **kwargs)["input_ids"])


def post(srv: ServerProcess, path: str, body: dict) -> dict:
    resp = httpx.post(f"{srv.url}/{path}", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def error_param(srv: ServerProcess, path: str, body: dict) -> str:
    resp = httpx.post(f"{srv.url}/{path}", json=body, timeout=60)
    assert resp.status_code == 400, resp.text
    return resp.json()["error"]["param"]


def test_chat_prompts_carry_the_templates_bos_only(srv: ServerProcess, model_dir: Path) -> None:
    want = hf_chat_ids(model_dir, ASK, add_generation_prompt=True)
    assert want[0] == 0 and want[1] != 0  # one BOS, from the template
    chat = post(srv, "v1/chat/completions", {"messages": ASK, **GREEDY})
    assert chat["usage"]["prompt_tokens"] == len(want)
    assert post(srv, "tokenize", {"messages": ASK})["tokens"] == want
    # with add_special_tokens the tokenizer's BOS comes on top, as vLLM's
    extra = post(
        srv, "v1/chat/completions", {"messages": ASK, "add_special_tokens": True, **GREEDY}
    )
    assert extra["usage"]["prompt_tokens"] == len(want) + 1
    # a completion's text prompt gets the tokenizer's BOS unless add_special_tokens is false
    counts = [
        post(srv, "v1/completions", {"prompt": "Hello", "add_special_tokens": flag, **GREEDY})
        for flag in (True, False)
    ]
    assert [c["usage"]["prompt_tokens"] for c in counts] == [2, 1]


def test_continue_final_message_and_echo(srv: ServerProcess, model_dir: Path) -> None:
    want = hf_chat_ids(model_dir, PREFILLED, continue_final_message=True)
    assert (
        post(srv, "tokenize", {"messages": PREFILLED, "continue_final_message": True})["tokens"]
        == want
    )
    body = {"messages": PREFILLED, "continue_final_message": True, **GREEDY}
    chat = post(srv, "v1/chat/completions", body)
    assert chat["usage"]["prompt_tokens"] == len(want)
    # the reply continues the prefilled message: the same as a completion of those tokens
    completion = post(srv, "v1/completions", {"prompt": want, **GREEDY})
    reply = chat["choices"][0]["message"]["content"]
    assert reply == completion["choices"][0]["text"] and reply

    echoed = post(srv, "v1/chat/completions", {**body, "echo": True})
    assert echoed["choices"][0]["message"]["content"] == "The capital of France is" + reply
    assert echoed["usage"] == chat["usage"]
    streamed = ""
    with httpx.stream(
        "POST", f"{srv.url}/v1/chat/completions", json={**body, "echo": True, "stream": True}
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    streamed += choice["delta"].get("content") or ""
    assert streamed == "The capital of France is" + reply

    both = {**body, "add_generation_prompt": True}
    assert error_param(srv, "v1/chat/completions", both) == "continue_final_message"


def test_llm_chat_matches_the_template(model_dir: Path) -> None:
    """LLM.chat (engine core in its own process) tokenizes as apply_chat_template(tokenize=True)
    and continues a prefilled reply as the server does."""
    llm = LLM(str(model_dir), max_model_len=256)
    try:
        params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
        (new_turn,) = llm.chat(ASK, params, use_tqdm=False)
        assert new_turn.prompt_token_ids == hf_chat_ids(model_dir, ASK, add_generation_prompt=True)
        (cont,) = llm.chat(
            PREFILLED,
            params,
            use_tqdm=False,
            add_generation_prompt=False,
            continue_final_message=True,
        )
        want = hf_chat_ids(model_dir, PREFILLED, continue_final_message=True)
        assert cont.prompt_token_ids == want
        (plain,) = llm.generate({"prompt_token_ids": want}, params, use_tqdm=False)
        assert cont.outputs[0].token_ids == plain.outputs[0].token_ids
        with pytest.raises(ValueError, match="continue_final_message"):
            llm.chat(PREFILLED, params, use_tqdm=False, continue_final_message=True)
    finally:
        llm.shutdown()


def test_truncate_prompt_tokens(srv: ServerProcess) -> None:
    long = list(range(3, 303))  # 300 tokens: past max_model_len (256)
    cut = post(srv, "v1/completions", {"prompt": long, "truncate_prompt_tokens": 100, **GREEDY})
    tail = post(srv, "v1/completions", {"prompt": long[-100:], **GREEDY})
    assert cut["usage"]["prompt_tokens"] == 100
    assert cut["choices"][0]["text"] == tail["choices"][0]["text"]
    chat = post(
        srv, "v1/chat/completions", {"messages": ASK, "truncate_prompt_tokens": 5, **GREEDY}
    )
    assert chat["usage"]["prompt_tokens"] == 5
    for bad in (0, -2, 257):
        body = {"prompt": "Hello", "truncate_prompt_tokens": bad, **GREEDY}
        assert error_param(srv, "v1/completions", body) == "truncate_prompt_tokens"


def test_return_tokens_as_token_ids(srv: ServerProcess) -> None:
    as_id = re.compile(r"token_id:(\d+)")

    def detokenize(tokens: list[str]) -> str:
        ids = [int(as_id.fullmatch(t).group(1)) for t in tokens]
        return post(srv, "detokenize", {"tokens": ids})["prompt"]

    extra = {"return_tokens_as_token_ids": True, **GREEDY}
    got = post(srv, "v1/completions", {"prompt": "Hello", "logprobs": 2, **extra})
    choice = got["choices"][0]
    assert detokenize(choice["logprobs"]["tokens"]) == choice["text"]
    assert all(as_id.fullmatch(k) for top in choice["logprobs"]["top_logprobs"] for k in top)
    chat = post(srv, "v1/chat/completions", {"messages": ASK, "logprobs": True, **extra})
    content = chat["choices"][0]["logprobs"]["content"]
    assert detokenize([c["token"] for c in content]) == chat["choices"][0]["message"]["content"]

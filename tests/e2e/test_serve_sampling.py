"""Sampling and structured outputs of `vgraph serve` through the official openai client.

Penalties are checked against a reference on the logits: Hugging Face transformers on the same
tiny model's weights, the penalties applied from their definitions, greedy token by token. The
choices are restricted (allowed_token_ids) to whole-word tokens so the text compares exactly.
Also: logit_bias forcing a token, a JSON-schema response that parses and validates, guided
choice and regex, a bad schema named in a 400, echo (with logprobs, streamed too), and
prompt_logprobs against the reference's log-softmax.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from tests.e2e.serve_utils import ServerProcess

pytest.importorskip("xgrammar")

PROMPT = "The quick brown fox jumps over the lazy dog and"
WORDS = [" the", " cat", " dog", " a", " and", " is", " red", " big", " on", " it", " to", " we"]
SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no", "maybe"]},
        "ok": {"type": "boolean"},
        "color": {"type": "string", "enum": ["red", "green"]},
    },
    "required": ["answer", "ok", "color"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def reference(serve_model_dir: Path) -> Any:
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        serve_model_dir, dtype=torch.float32
    ).eval()


@pytest.fixture(scope="module")
def tokenizer(serve_model_dir: Path) -> Any:
    import transformers

    return transformers.AutoTokenizer.from_pretrained(serve_model_dir)


@pytest.fixture(scope="module")
def word_ids(tokenizer: Any) -> list[int]:
    ids = [tokenizer.encode(w, add_special_tokens=False) for w in WORDS]
    assert all(len(i) == 1 for i in ids), ids  # each a single token
    return [i[0] for i in ids]


@torch.inference_mode()
def reference_greedy(
    model: Any,
    prompt_ids: list[int],
    allowed: list[int],
    steps: int,
    presence: float = 0.0,
    frequency: float = 0.0,
    repetition: float = 1.0,
) -> list[int]:
    """Greedy decoding with the penalties applied to the logits from their definitions."""
    ids, out = list(prompt_ids), []
    for _ in range(steps):
        logits = model(torch.tensor([ids])).logits[0, -1].double()
        best, best_score = -1, float("-inf")
        for t in allowed:
            x = logits[t].item()
            if t in ids:  # in the prompt or the output
                x = x / repetition if x > 0 else x * repetition
            count = out.count(t)
            x -= frequency * count + presence * (count > 0)
            if x > best_score:
                best, best_score = t, x
        out.append(best)
        ids.append(best)
    return out


@pytest.mark.parametrize(
    "penalties",
    [
        {},
        {"presence_penalty": 1.5},
        {"frequency_penalty": 0.8},
        {"repetition_penalty": 1.6},
        {"presence_penalty": -0.5, "frequency_penalty": 0.5, "repetition_penalty": 0.8},
    ],
    ids=["none", "presence", "frequency", "repetition", "all"],
)
def test_penalties_follow_the_reference(
    client: openai.OpenAI,
    server: ServerProcess,
    reference: Any,
    tokenizer: Any,
    word_ids: list[int],
    penalties: dict[str, float],
) -> None:
    prompt_ids = tokenizer.encode(PROMPT)
    steps = 12
    got = client.completions.create(
        model=server.model_name,
        prompt=PROMPT,
        max_tokens=steps,
        temperature=0,
        presence_penalty=penalties.get("presence_penalty"),
        frequency_penalty=penalties.get("frequency_penalty"),
        extra_body={
            "allowed_token_ids": word_ids,
            "ignore_eos": True,
            **(
                {"repetition_penalty": penalties["repetition_penalty"]}
                if "repetition_penalty" in penalties
                else {}
            ),
        },
    )
    names = {"presence_penalty": "presence", "frequency_penalty": "frequency"}
    kw = {names.get(k, "repetition"): v for k, v in penalties.items()}
    want = reference_greedy(reference, prompt_ids, word_ids, steps, **kw)
    assert got.choices[0].text == tokenizer.decode(want)
    if penalties:  # the penalty mattered: without it the reference says otherwise
        assert want != reference_greedy(reference, prompt_ids, word_ids, steps)


def test_logit_bias_forces_a_token(
    client: openai.OpenAI, server: ServerProcess, word_ids: list[int]
) -> None:
    got = client.chat.completions.create(
        model=server.model_name,
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=5,
        temperature=1.0,
        logit_bias={str(word_ids[1]): 100},
        extra_body={"ignore_eos": True},
    )
    assert got.choices[0].message.content == WORDS[1] * 5


def test_json_schema_response_parses_and_validates(
    client: openai.OpenAI, server: ServerProcess
) -> None:
    for temperature in (0.0, 1.0):
        got = client.chat.completions.create(
            model=server.model_name,
            messages=[{"role": "user", "content": "Answer as JSON."}],
            max_tokens=64,
            temperature=temperature,
            seed=3,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": SCHEMA},
            },
        )
        choice = got.choices[0]
        assert choice.finish_reason == "stop"
        value = json.loads(choice.message.content)
        assert set(value) == {"answer", "ok", "color"}
        assert value["answer"] in ("yes", "no", "maybe") and isinstance(value["ok"], bool)
        assert value["color"] in ("red", "green")


def test_json_object_choice_and_regex(client: openai.OpenAI, server: ServerProcess) -> None:
    obj = client.chat.completions.create(
        model=server.model_name,
        messages=[{"role": "user", "content": "JSON please."}],
        max_tokens=48,
        temperature=0,
        response_format={"type": "json_object"},
    )
    if obj.choices[0].finish_reason == "stop":  # a random model may talk until max_tokens
        assert isinstance(json.loads(obj.choices[0].message.content), dict)
    else:
        assert obj.choices[0].message.content.startswith("{")
    choice = client.completions.create(
        model=server.model_name,
        prompt=PROMPT,
        max_tokens=10,
        temperature=1.0,
        extra_body={"guided_choice": ["alpha", "beta gamma"]},
    )
    assert choice.choices[0].text in ("alpha", "beta gamma")
    regex = client.completions.create(
        model=server.model_name,
        prompt=PROMPT,
        max_tokens=10,
        temperature=1.0,
        extra_body={"structured_outputs": {"regex": "[0-9]{3}-[ab]"}},
    )
    text = regex.choices[0].text
    assert len(text) == 5 and text[:3].isdigit() and text[3] == "-" and text[4] in "ab"


def test_bad_schema_is_a_400_naming_the_problem(
    client: openai.OpenAI, server: ServerProcess
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=server.model_name,
            messages=[{"role": "user", "content": "hi"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "nope"}},
            },
        )
    assert "structured_outputs.json" in str(err.value) and "nope" in str(err.value)
    with pytest.raises(openai.BadRequestError, match="only one structured-output"):
        client.completions.create(
            model=server.model_name,
            prompt="hi",
            extra_body={"guided_regex": "a+", "guided_choice": ["b"]},
        )


@torch.inference_mode()
def reference_prompt_logprobs(model: Any, prompt_ids: list[int]) -> list[float]:
    logprobs = model(torch.tensor([prompt_ids])).logits[0].double().log_softmax(-1)
    return [logprobs[p - 1, prompt_ids[p]].item() for p in range(1, len(prompt_ids))]


def test_prompt_logprobs_match_the_reference(
    client: openai.OpenAI, server: ServerProcess, reference: Any, tokenizer: Any
) -> None:
    prompt_ids = tokenizer.encode(PROMPT)
    got = client.completions.create(
        model=server.model_name,
        prompt=PROMPT,
        max_tokens=2,
        temperature=0,
        extra_body={"prompt_logprobs": 3},
    )
    entries = got.choices[0].model_extra["prompt_logprobs"]
    assert len(entries) == len(prompt_ids) and entries[0] is None
    want = reference_prompt_logprobs(reference, prompt_ids)
    for p, (entry, ref) in enumerate(zip(entries[1:], want), start=1):
        assert abs(entry[str(prompt_ids[p])]["logprob"] - ref) < 1e-3
        assert len(entry) <= 4  # the prompt token and the top 3


def test_streamed_prompt_logprobs_equal_the_whole_response(
    client: openai.OpenAI, server: ServerProcess
) -> None:
    """Streamed, prompt_logprobs ride on each choice's first chunk with content (after the role
    chunk in a chat), equal to the unstreamed response's; completions and chat alike."""
    kw = {"model": server.model_name, "max_tokens": 3, "temperature": 0}
    extra = {"extra_body": {"prompt_logprobs": 2}}
    whole = client.completions.create(prompt=PROMPT, **kw, **extra)
    want = whole.choices[0].model_extra["prompt_logprobs"]
    chunks = list(client.completions.create(prompt=PROMPT, stream=True, **kw, **extra))
    carried = [c.choices[0].model_extra.get("prompt_logprobs") for c in chunks if c.choices]
    assert carried[0] == want and all(c is None for c in carried[1:])
    messages = [{"role": "user", "content": PROMPT}]
    whole = client.chat.completions.create(messages=messages, **kw, **extra)
    want = whole.model_extra["prompt_logprobs"]
    assert want and want[0] is None
    chunks = list(client.chat.completions.create(messages=messages, stream=True, **kw, **extra))
    carried = [c.choices[0].model_extra.get("prompt_logprobs") for c in chunks if c.choices]
    assert carried[0] is None  # the role chunk
    assert carried[1] == want and all(c is None for c in carried[2:])


def test_echo_with_logprobs(
    client: openai.OpenAI, server: ServerProcess, reference: Any, tokenizer: Any
) -> None:
    prompt_ids = tokenizer.encode(PROMPT)
    kw = {"model": server.model_name, "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
    got = client.completions.create(echo=True, logprobs=1, **kw)
    plain = client.completions.create(**kw)
    choice = got.choices[0]
    assert choice.text == PROMPT + plain.choices[0].text
    lp = choice.logprobs
    assert len(lp.tokens) == len(prompt_ids) + got.usage.completion_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert "".join(lp.tokens[: len(prompt_ids)]) == PROMPT
    want = reference_prompt_logprobs(reference, prompt_ids)
    for got_lp, ref in zip(lp.token_logprobs[1 : len(prompt_ids)], want):
        assert abs(got_lp - ref) < 1e-3
    streamed = client.completions.create(echo=True, stream=True, **kw)
    chunks = [c.choices[0].text for c in streamed if c.choices]
    assert chunks[0].startswith(PROMPT) and "".join(chunks) == choice.text


def test_echo_without_generation_scores_the_prompt(
    client: openai.OpenAI, server: ServerProcess, tokenizer: Any
) -> None:
    """echo with max_tokens 0 (vLLM's scoring request): the prompt and its logprobs come back,
    nothing generated, streamed or not; max_tokens 0 without echo is a 400 naming max_tokens."""
    prompt_ids = tokenizer.encode(PROMPT)
    kw = {"model": server.model_name, "prompt": PROMPT, "max_tokens": 0, "temperature": 0}
    full = client.completions.create(echo=True, logprobs=1, **{**kw, "max_tokens": 4})
    got = client.completions.create(echo=True, logprobs=1, **kw)
    choice = got.choices[0]
    assert choice.text == PROMPT and choice.finish_reason == "length"
    assert len(choice.logprobs.tokens) == len(prompt_ids)
    n = len(prompt_ids)
    assert choice.logprobs.token_logprobs == pytest.approx(
        full.choices[0].logprobs.token_logprobs[:n], abs=1e-4
    )
    streamed = list(client.completions.create(echo=True, stream=True, logprobs=1, **kw))
    texts = [c.choices[0].text for c in streamed if c.choices]
    assert "".join(texts) == PROMPT
    assert sum(len(c.choices[0].logprobs.tokens) for c in streamed if c.choices) == n
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(**kw)
    assert err.value.body["param"] == "max_tokens" and "echo" in err.value.body["message"]


FORCED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "set_unit",
            "parameters": {
                "type": "object",
                "properties": {"unit": {"type": "string", "enum": ["celsius", "kelvin"]}},
                "required": ["unit"],
            },
        },
    }
]


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_choice_gives_valid_calls(
    client: openai.OpenAI, server: ServerProcess, tokenizer: Any, stream: bool
) -> None:
    """tool_choice required / named on a random model that never writes a call by itself: the
    structured output makes the reply a valid call (for required, "]" is biased so the array
    closes after its first call rather than run to max_tokens)."""
    (close,) = tokenizer.encode("]", add_special_tokens=False)
    named = {"type": "function", "function": {"name": "set_unit"}}
    for tool_choice, bias in ((named, None), ("required", {str(close): 100})):
        kw = {
            "model": server.model_name,
            "messages": [{"role": "user", "content": "Switch to celsius."}],
            "tools": FORCED_TOOLS,
            "tool_choice": tool_choice,
            "max_tokens": 60,
            "temperature": 0,
            "logit_bias": bias,
        }
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kw))
            calls = [c for ch in chunks for c in ch.choices[0].delta.tool_calls or []]
            finish = chunks[-1].choices[0].finish_reason
        else:
            choice = client.chat.completions.create(**kw).choices[0]
            calls, finish = choice.message.tool_calls or [], choice.finish_reason
        assert finish == "tool_calls" and len(calls) >= 1, (tool_choice, calls)
        assert calls[0].function.name == "set_unit"
        assert json.loads(calls[0].function.arguments)["unit"] in ("celsius", "kelvin")

"""`vgraph serve` through the official openai client: completions and chat, streaming and not,
n > 1, stop strings, logprobs, usage; greedy answers equal the offline LLM's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.serve_utils import ServerProcess, wait_until
from vgraph import LLM, SamplingParams

PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "Tell me a story about a fox."}]


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def offline(serve_model_dir: Path) -> Iterator[LLM]:
    llm = LLM(
        str(serve_model_dir), multiprocess=False, max_model_len=256, num_gpu_blocks_override=256
    )
    yield llm
    llm.shutdown()


def greedy(max_tokens: int, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


def test_models_version_health(server: ServerProcess, client: openai.OpenAI) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == [server.model_name]
    assert httpx.get(f"{server.url}/version").json()["version"]
    assert server.health() == 200


def test_completion_equals_offline(client: openai.OpenAI, offline: LLM, server) -> None:
    ref = offline.generate(PROMPT, greedy(12), use_tqdm=False)[0]
    got = client.completions.create(
        model=server.model_name, prompt=PROMPT, max_tokens=12, temperature=0
    )
    choice = got.choices[0]
    assert choice.text == ref.outputs[0].text
    assert choice.finish_reason == ref.outputs[0].finish_reason
    assert got.usage.prompt_tokens == len(ref.prompt_token_ids)
    assert got.usage.completion_tokens == len(ref.outputs[0].token_ids)
    assert got.usage.total_tokens == got.usage.prompt_tokens + got.usage.completion_tokens

    ids = ref.prompt_token_ids  # a token-id prompt answers the same
    by_ids = client.completions.create(
        model=server.model_name, prompt=ids, max_tokens=12, temperature=0
    )
    assert by_ids.choices[0].text == ref.outputs[0].text


def test_completion_stream_equals_offline(client: openai.OpenAI, offline: LLM, server) -> None:
    ref = offline.generate(PROMPT, greedy(12, ignore_eos=True), use_tqdm=False)[0].outputs[0]
    chunks = list(
        client.completions.create(
            model=server.model_name,
            prompt=PROMPT,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == ref.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    # the raw stream is SSE and ends with [DONE]
    body = {"prompt": PROMPT, "max_tokens": 3, "stream": True}
    raw = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [e for e in raw.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"


def test_chat_equals_offline(client: openai.OpenAI, offline: LLM, server) -> None:
    ref = offline.chat(MESSAGES, greedy(10), use_tqdm=False)[0]
    got = client.chat.completions.create(
        model=server.model_name, messages=MESSAGES, max_tokens=10, temperature=0
    )
    assert got.choices[0].message.role == "assistant"
    assert got.choices[0].message.content == ref.outputs[0].text
    assert got.usage.prompt_tokens == len(ref.prompt_token_ids)
    assert got.usage.completion_tokens == len(ref.outputs[0].token_ids)

    stream = client.chat.completions.create(
        model=server.model_name,
        messages=MESSAGES,
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref.outputs[0].text
    assert chunks[-1].usage.completion_tokens == len(ref.outputs[0].token_ids)


def test_n_samples_seeded(client: openai.OpenAI, server) -> None:
    def ask():
        return client.completions.create(
            model=server.model_name,
            prompt=PROMPT,
            max_tokens=6,
            n=3,
            temperature=1.0,
            seed=7,
            extra_body={"ignore_eos": True},
        )

    first, second = ask(), ask()
    assert sorted(c.index for c in first.choices) == [0, 1, 2]
    assert first.usage.completion_tokens == 18
    assert [c.text for c in first.choices] == [c.text for c in second.choices]
    assert len({c.text for c in first.choices}) > 1  # distinct seeds per sample

    chat = client.chat.completions.create(
        model=server.model_name,
        messages=MESSAGES,
        n=2,
        max_tokens=4,
        temperature=0.8,
        seed=1,
        stream=True,
    )
    seen: dict[int, str] = {}
    for c in chat:
        for ch in c.choices:
            seen[ch.index] = seen.get(ch.index, "") + (ch.delta.content or "")
    assert sorted(seen) == [0, 1]

    batch = client.completions.create(
        model=server.model_name, prompt=[PROMPT, "Hello"], max_tokens=3, n=2, temperature=0
    )
    assert sorted(c.index for c in batch.choices) == [0, 1, 2, 3]
    assert batch.choices[0].text == batch.choices[1].text  # greedy: both samples agree


def test_stop_strings(client: openai.OpenAI, server) -> None:
    full = client.completions.create(
        model=server.model_name,
        prompt=PROMPT,
        max_tokens=16,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    text = full.choices[0].text
    stop = next(
        text[i : i + 3]
        for i in range(len(text) // 2, len(text) - 3)
        if text[i : i + 3].strip() == text[i : i + 3]
    )
    cut = text.index(stop)
    got = client.completions.create(
        model=server.model_name,
        prompt=PROMPT,
        max_tokens=16,
        temperature=0,
        stop=[stop],
        extra_body={"ignore_eos": True},
    )
    assert got.choices[0].text == text[:cut]
    assert got.choices[0].finish_reason == "stop"
    streamed = client.completions.create(
        model=server.model_name,
        prompt=PROMPT,
        max_tokens=16,
        temperature=0,
        stop=stop,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == text[:cut]
    kept = client.completions.create(
        model=server.model_name,
        prompt=PROMPT,
        max_tokens=16,
        temperature=0,
        stop=[stop],
        extra_body={"ignore_eos": True, "include_stop_str_in_output": True},
    )
    assert kept.choices[0].text == text[: cut + len(stop)]


def test_completion_logprobs(client: openai.OpenAI, offline: LLM, server) -> None:
    ref = offline.generate(PROMPT, greedy(5, logprobs=3), use_tqdm=False)[0].outputs[0]
    got = client.completions.create(
        model=server.model_name, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=3
    ).choices[0]
    lp = got.logprobs
    assert "".join(lp.tokens) == got.text
    assert len(lp.token_logprobs) == len(ref.token_ids) == 5
    for token_id, value, top, want in zip(
        ref.token_ids, lp.token_logprobs, lp.top_logprobs, ref.logprobs
    ):
        assert value == pytest.approx(want[token_id].logprob, abs=1e-4)
        assert 3 <= len(top) <= 4
        assert max(top.values()) == pytest.approx(value, abs=1e-4)  # greedy: the top token
    assert lp.text_offset[0] == 0


def test_chat_logprobs(client: openai.OpenAI, server) -> None:
    got = client.chat.completions.create(
        model=server.model_name,
        messages=MESSAGES,
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    content = got.choices[0].logprobs.content
    assert len(content) == got.usage.completion_tokens == 4
    assert "".join(t.token for t in content) == got.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 2
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
        assert t.logprob == pytest.approx(t.top_logprobs[0].logprob, abs=1e-5)


def test_streamed_logprobs_and_usage_equal_the_whole(client: openai.OpenAI, server) -> None:
    """Streamed chunks carry the logprobs of their own tokens (completions: text offsets run on
    across chunks) and, with continuous_usage_stats, the usage so far; continuous_usage_stats
    without include_usage adds no usage (vLLM's rule), and a chat stream's role chunk carries
    the prompt's."""
    kw = {"model": server.model_name, "max_tokens": 6, "temperature": 0}
    usage_opts = {"include_usage": True, "continuous_usage_stats": True}
    whole = client.completions.create(prompt=[PROMPT, "Hello"], logprobs=2, **kw)
    chunks = list(
        client.completions.create(
            prompt=[PROMPT, "Hello"], logprobs=2, stream=True, stream_options=usage_opts, **kw
        )
    )
    for choice in whole.choices:
        parts = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == choice.index]
        tokens = [t for p in parts for t in p.logprobs.tokens]
        offsets = [o for p in parts for o in p.logprobs.text_offset]
        assert tokens == choice.logprobs.tokens and offsets == choice.logprobs.text_offset
        assert [v for p in parts for v in p.logprobs.token_logprobs] == pytest.approx(
            choice.logprobs.token_logprobs, abs=1e-4
        )
    running = [c.usage.completion_tokens for c in chunks if c.choices]
    assert running == sorted(running) and running[-1] == whole.usage.completion_tokens == 12
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    alone = {"continuous_usage_stats": True}
    bare = list(client.completions.create(prompt=PROMPT, stream=True, stream_options=alone, **kw))
    assert bare and all(c.usage is None and c.choices for c in bare)

    chat_kw = {**kw, "messages": MESSAGES, "logprobs": True, "top_logprobs": 2}
    whole_chat = client.chat.completions.create(**chat_kw).choices[0].logprobs.content
    streamed = list(client.chat.completions.create(stream=True, **chat_kw))
    assert streamed[0].choices[0].logprobs is None  # the role chunk
    with_usage = list(
        client.chat.completions.create(stream=True, stream_options=usage_opts, **chat_kw)
    )
    role = with_usage[0]
    assert role.choices[0].delta.role == "assistant" and role.usage.completion_tokens == 0
    assert role.usage.prompt_tokens == with_usage[-1].usage.prompt_tokens > 0
    content = [t for c in streamed[1:] for t in c.choices[0].logprobs.content]
    assert [t.token for t in content] == [t.token for t in whole_chat]
    assert [t.logprob for t in content] == pytest.approx([t.logprob for t in whole_chat], abs=1e-4)


def test_disconnect_aborts_and_frees_blocks(server: ServerProcess) -> None:
    before = metric(server, "generation_tokens_total")
    body = {"prompt": PROMPT, "max_tokens": 240, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as resp:
        lines = resp.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
    # the connection is closed: the request must be aborted and its KV blocks freed
    wait_until(
        lambda: (
            metric(server, "num_requests_running") == 0
            and metric(server, "kv_cache_usage_perc") == 0.0
        ),
        30,
        "the abort",
    )
    assert metric(server, "generation_tokens_total") - before < 240  # it did not run to the end


def metric(server: ServerProcess, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith((f"vgraph:{name}{{", f"vgraph:{name} ")):
            total += float(line.rsplit(" ", 1)[1])
    return total

"""One request's data cannot take the server down or hold it: token ids are checked against the
vocabulary (400 naming the field), prompts x n is bounded, a big fan-out request does not keep a
small one waiting, a valid seed works with n > 1, and a tiny temperature is greedy. A real
`vgraph serve` and real clients (openai, httpx)."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from tests.e2e.serve_utils import ServerProcess, wait_until
from tests.e2e.test_serve_openai import metric

VOCAB = 49152  # of the tiny serving model (the default model's tokenizer)


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def assert_serving(server: ServerProcess, client: openai.OpenAI) -> None:
    assert server.health() == 200
    out = client.completions.create(
        model=server.model_name, prompt="Hello", max_tokens=3, extra_body={"ignore_eos": True}
    )
    assert out.usage.completion_tokens == 3


@pytest.mark.parametrize("token_id", [VOCAB, 100_000, 2**31 - 1])
@pytest.mark.parametrize("stream", [False, True])
def test_stop_token_ids_outside_the_vocabulary(
    server: ServerProcess, client: openai.OpenAI, token_id: int, stream: bool
) -> None:
    extra = {"min_tokens": 1, "stop_token_ids": [3, token_id]}
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(
            model=server.model_name, prompt="hi", max_tokens=2, stream=stream, extra_body=extra
        )
    body = err.value.body
    assert body["param"] == "stop_token_ids" and str(token_id) in body["message"], body
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=server.model_name,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            stream=stream,
            extra_body=extra,
        )
    assert err.value.body["param"] == "stop_token_ids"
    assert_serving(server, client)


def test_the_last_vocabulary_id_is_a_valid_stop_token(
    server: ServerProcess, client: openai.OpenAI
) -> None:
    out = client.completions.create(
        model=server.model_name,
        prompt="hi",
        max_tokens=2,
        extra_body={"min_tokens": 1, "stop_token_ids": [VOCAB - 1]},
    )
    assert out.choices[0].finish_reason in ("stop", "length")


def test_prompts_times_n_is_bounded(server: ServerProcess) -> None:
    # about 1 KB of JSON that used to become 16,384 sequences
    resp = httpx.post(
        f"{server.url}/v1/completions",
        json={"prompt": ["a"] * 128, "n": 128, "max_tokens": 1},
        timeout=30,
    )
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == "n" and err["code"] == "too_many_sequences"
    assert "16384" in err["message"] and "256" in err["message"]
    assert "--max-seqs-per-request" in err["message"]


def test_a_small_request_is_served_while_a_big_fan_out_runs(server: ServerProcess) -> None:
    """The big request holds every seat of the engine (max_num_seqs 256) for 60 steps; a small
    one sent while it runs must not wait for it: it finishes first (then the big one is
    dropped, which aborts it)."""
    wait_until(lambda: metric(server, "num_requests_running") == 0, 30, "an idle engine")
    url = f"{server.url}/v1/completions"
    big = {"prompt": ["Hello", "World"], "n": 128, "max_tokens": 60, "ignore_eos": True}
    done: list[str] = []
    small_done = threading.Event()

    def stream_big() -> None:
        with httpx.stream("POST", url, json={**big, "stream": True}, timeout=300) as resp:
            for line in resp.iter_lines():
                if line == "data: [DONE]":
                    done.append("big")
                if small_done.is_set():
                    return

    thread = threading.Thread(target=stream_big)
    thread.start()
    try:
        wait_until(lambda: metric(server, "num_requests_running") >= 200, 60, "the big request")
        small = httpx.post(url, json={"prompt": "Hi", "max_tokens": 2}, timeout=300)
        assert small.status_code == 200 and small.json()["usage"]["completion_tokens"] == 2
        done.append("small")
    finally:
        small_done.set()
        thread.join(300)
    assert done[0] == "small", done
    wait_until(
        lambda: (
            metric(server, "num_requests_running") == 0
            and metric(server, "kv_cache_usage_perc") == 0.0
        ),
        60,
        "the big request's abort",
    )


def test_largest_seed_with_n_samples(server: ServerProcess, client: openai.OpenAI) -> None:
    def ask() -> list[str]:
        out = client.completions.create(
            model=server.model_name,
            prompt="Hello",
            max_tokens=4,
            seed=2**63 - 1,
            n=2,
            temperature=1.0,
            extra_body={"ignore_eos": True},
        )
        assert sorted(c.index for c in out.choices) == [0, 1]
        return [c.text for c in out.choices]

    assert ask() == ask()  # seeded: the same samples again


@pytest.mark.parametrize("temperature", [1e-39, 1e-7])
def test_tiny_temperature_is_greedy(
    server: ServerProcess, client: openai.OpenAI, temperature: float
) -> None:
    def ask(t: float) -> str:
        out = client.completions.create(
            model=server.model_name,
            prompt="The capital of France is",
            max_tokens=8,
            temperature=t,
            extra_body={"ignore_eos": True},
        )
        return out.choices[0].text

    assert ask(temperature) == ask(0.0)


def test_max_seqs_per_request_flag() -> None:
    from vgraph.entrypoints.cli import make_parser

    parser = make_parser(["serve"])
    assert parser.parse_args(["serve"]).max_seqs_per_request == 256
    assert parser.parse_args(["serve", "--max-seqs-per-request", "8"]).max_seqs_per_request == 8
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--max-seqs-per-request", "0"])

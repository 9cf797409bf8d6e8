"""Prefix caching through `vgraph serve` (the shared server, prefix caching on by default):
usage.prompt_tokens_details.cached_tokens, the /metrics prefix-cache counters, and vLLM's
cache_salt keeping tenants' cached blocks apart."""

from __future__ import annotations

import random
import re

import httpx

from tests.e2e.serve_utils import ServerProcess

# a prompt of well over 4 blocks of 16 tokens, unique to this module so no other test cached it
PROMPT = " ".join(f"prefix-cache-probe word{i}" for i in range(14))
# 100 token ids (6 full blocks + 4: a hit covers 96), unique to the cache_salt test
SALT_PROMPT = [random.Random(2024).randrange(1000, 40000) for _ in range(100)]


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
    assert match is not None, name
    return float(match.group(1))


def test_second_request_reports_cached_tokens_and_metrics_count_them(
    server: ServerProcess,
) -> None:
    before = httpx.get(f"{server.url}/metrics").text
    body = {"model": server.model_name, "prompt": PROMPT, "max_tokens": 2, "temperature": 0}
    first = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()["usage"]
    second = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()["usage"]
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}
    cached = second["prompt_tokens_details"]["cached_tokens"]
    # whole blocks, and the last prompt token is always computed
    assert cached % 16 == 0 and second["prompt_tokens"] - 16 <= cached < second["prompt_tokens"]
    stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=stream, timeout=60) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: {")]
    assert f'"cached_tokens":{cached}' in events[-1].replace(" ", "")
    after = httpx.get(f"{server.url}/metrics").text
    hits = metric(after, "vgraph:prefix_cache_hits_total") - metric(
        before, "vgraph:prefix_cache_hits_total"
    )
    queries = metric(after, "vgraph:prefix_cache_queries_total") - metric(
        before, "vgraph:prefix_cache_queries_total"
    )
    assert hits == 2 * cached and queries == 3 * second["prompt_tokens"]


def test_cache_salt_shares_cached_blocks_only_within_a_salt(server: ServerProcess) -> None:
    """The tester's repro: tenantB used to get tenantA's 96 cached tokens; vLLM gives 0."""

    def cached(path: str, body: dict, **extra: object) -> int:
        body = {"model": server.model_name, "max_tokens": 1, **body, **extra}
        resp = httpx.post(f"{server.url}/v1/{path}", json=body, timeout=60)
        assert resp.status_code == 200, resp.text
        return resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    prompt = {"prompt": SALT_PROMPT}
    runs = [cached("completions", prompt, cache_salt="tenantA")]
    runs.append(cached("completions", prompt, cache_salt="tenantB"))
    runs.append(cached("completions", prompt, cache_salt="tenantA"))
    runs.append(cached("completions", prompt))  # no salt shares nothing with salted requests
    runs.append(cached("completions", prompt))
    assert runs == [0, 0, 96, 0, 96]
    # chat too: the rendered conversation is salted as a whole
    chat = {"messages": [{"role": "user", "content": PROMPT + " salted chat"}]}
    assert cached("chat/completions", chat, cache_salt="tenantA") == 0
    assert cached("chat/completions", chat, cache_salt="tenantB") == 0
    assert cached("chat/completions", chat, cache_salt="tenantA") >= 64
    resp = httpx.post(f"{server.url}/v1/completions", json={**prompt, "cache_salt": ""}, timeout=60)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "cache_salt"

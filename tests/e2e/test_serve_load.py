"""Load: 64 concurrent streams plus 200 more at a steady rate, all complete with exactly
max_tokens tokens and no error; afterwards no request runs and the KV cache is empty. Then
`vgraph bench serve` drives the same server and reports every request."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from tests.e2e.serve_utils import REPO, ServerProcess, wait_until
from tests.e2e.test_serve_openai import metric

MAX_TOKENS = 8
NUM_BURST = 64
NUM_STEADY = 200
STEADY_RATE = 50.0  # requests per second


async def stream_one(client: openai.AsyncOpenAI, model: str, i: int) -> int:
    """One streaming completion; returns its completion token count (checked two ways)."""
    stream = await client.completions.create(
        model=model,
        prompt=f"Request number {i} says",
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        logprobs=1,
        extra_body={"ignore_eos": True},
    )
    num_chunks, num_tokens, finish, usage = 0, 0, None, None
    async for chunk in stream:
        if chunk.choices:
            # a chunk per engine step, or several steps' tokens where the stream fell behind
            num_chunks += 1
            num_tokens += len(chunk.choices[0].logprobs.tokens)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    assert finish == "length"
    assert num_tokens == usage and 1 <= num_chunks <= usage
    return usage


async def run_load(server: ServerProcess) -> list[int | BaseException]:
    # no keep-alive: a pooled connection reused just as the server's keep-alive timer closes
    # it fails on the client side (no retries here), which is not what this test is about
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    http = httpx.AsyncClient(limits=limits, timeout=120)
    client = openai.AsyncOpenAI(
        base_url=f"{server.url}/v1", api_key="x", max_retries=0, http_client=http
    )
    async with http:
        tasks = [
            asyncio.create_task(stream_one(client, server.model_name, i)) for i in range(NUM_BURST)
        ]
        for i in range(NUM_STEADY):
            tasks.append(asyncio.create_task(stream_one(client, server.model_name, NUM_BURST + i)))
            await asyncio.sleep(1.0 / STEADY_RATE)
        return await asyncio.gather(*tasks, return_exceptions=True)


def test_load_every_request_completes(server: ServerProcess) -> None:
    results = asyncio.run(run_load(server))
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, [(e, e.__cause__) for e in errors[:3]]
    assert results == [MAX_TOKENS] * (NUM_BURST + NUM_STEADY)
    wait_until(
        lambda: (
            metric(server, "num_requests_running") == 0
            and metric(server, "num_requests_waiting") == 0
        ),
        30,
        "an idle engine",
    )
    assert metric(server, "kv_cache_usage_perc") == 0.0
    n = NUM_BURST + NUM_STEADY
    assert metric(server, "request_success_total") >= n
    assert metric(server, "time_to_first_token_seconds_count") >= n
    assert metric(server, "e2e_request_latency_seconds_count") >= n
    assert metric(server, "inter_token_latency_seconds_count") >= n * (MAX_TOKENS - 1)
    assert metric(server, "generation_tokens_total") >= n * MAX_TOKENS
    assert metric(server, "prompt_tokens_total") >= n
    assert metric(server, "cudagraph_steps_total") >= MAX_TOKENS  # graph counters exported
    # every decode step of the load is in the batch-size histograms, 64 streams at most
    decode_steps = metric(server, "decode_batch_size_count")
    assert decode_steps >= MAX_TOKENS - 1
    assert metric(server, "padded_decode_batch_size_count") == decode_steps
    assert 1 <= metric(server, "decode_batch_size_sum") / decode_steps <= NUM_BURST
    buckets = [ln for ln in metrics_text(server).splitlines() if "decode_batch_size_bucket" in ln]
    assert any('le="64' in ln for ln in buckets) and any('le="+Inf"' in ln for ln in buckets)
    assert server.health() == 200


def metrics_text(server: ServerProcess) -> str:
    return httpx.get(f"{server.url}/metrics", timeout=10).text


def test_bench_serve(server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vgraph.entrypoints.cli",
            "bench",
            "serve",
            "--base-url",
            server.url,
            "--num-prompts",
            "12",
            "--dataset-name",
            "random",
            "--random-input-len",
            "16",
            "--random-output-len",
            "6",
            "--max-concurrency",
            "4",
            "--request-rate",
            "100",
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,99",
            "--result-dir",
            str(out.parent),
            "--result-filename",
            out.name,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in (
        "Successful requests:",
        "Request throughput (req/s):",
        "Output token throughput (tok/s):",
        "Median TTFT (ms):",
        "P99 TPOT (ms):",
        "Mean ITL (ms):",
        "P99 E2EL (ms):",
        "P50 ITL (ms):",
    ):
        assert line in proc.stdout, proc.stdout
    report = json.loads(out.read_text())
    assert report["completed"] == 12 and report["failed"] == 0
    assert report["total_output_tokens"] == 12 * 6
    assert report["total_input_tokens"] == 12 * 16
    assert 0 < report["median_ttft_ms"] <= report["median_e2el_ms"]
    # percentiles as numpy computes them (linear interpolation), over the per-request values
    ttfts = [r["ttft"] * 1000 for r in report["requests"]]
    for p in (50, 99):
        assert report[f"p{p}_ttft_ms"] == pytest.approx(float(np.percentile(ttfts, p)))

"""Tuning from live traffic: a real `vgraph serve` counts its decode batch sizes on /metrics, and
`vgraph bench sweep --workload-url` reads them back as its workload and recommends from them."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import openai
import pytest

from tests.e2e.serve_utils import ServerProcess
from tests.e2e.test_serve_openai import metric
from vgraph.bench.sweep import add_cli_args, main
from vgraph.bench.workload import load_histogram

NUM_REQUESTS = 3
MAX_TOKENS = 6
SMALL = ("--max-num-seqs", "4", "--compilation-config", '{"cudagraph_capture_sizes": [1, 2, 4]}')


async def _generate(server: ServerProcess) -> None:
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    async with client:
        await asyncio.gather(
            *(
                client.completions.create(
                    model=server.model_name,
                    prompt=f"Request {i} says",
                    max_tokens=MAX_TOKENS,
                    temperature=0,
                    extra_body={"ignore_eos": True},
                )
                for i in range(NUM_REQUESTS)
            )
        )


@pytest.fixture(scope="module")
def busy_server(serve_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A server of its own, after some traffic: its histogram holds this module's steps only
    (the shared server's holds the load test's batches of up to 64, slow to sweep on a CPU)."""
    srv = ServerProcess(serve_model_dir, tmp_path_factory.mktemp("sweep-server"), *SMALL)
    try:
        srv.wait_healthy()
        asyncio.run(_generate(srv))
        yield srv
    finally:
        srv.stop()


def test_histogram_from_metrics_url(busy_server: ServerProcess) -> None:
    hist = load_histogram(f"{busy_server.url}/metrics")
    steps = metric(busy_server, "decode_batch_size_count")
    # every decode step is counted once, at a batch of the requests that were running
    assert sum(hist.values()) == steps >= MAX_TOKENS - 1
    assert set(hist) <= set(range(1, NUM_REQUESTS + 1)), hist
    assert sum(b * n for b, n in hist.items()) == metric(busy_server, "decode_batch_size_sum")


def test_sweep_tunes_from_the_server(
    busy_server: ServerProcess, tiny_checkpoint, tmp_path, single_thread
) -> None:
    out = tmp_path / "sweep.json"
    url = f"{busy_server.url}/metrics"
    argv = (
        f"--model {tiny_checkpoint('llama')} --load-format auto --modes FULL_DECODE_ONLY "
        f"--lists recommended --workload-url {url} --concurrency 2 --input-len 4 "
        f"--output-len 3 --max-num-seqs 4 --max-sizes 2 --num-iters 2 --num-warmup 1 "
        f"--num-rounds 1 --out {out} --plot-dir {tmp_path}"
    )
    main(add_cli_args(argparse.ArgumentParser()).parse_args(argv.split()))
    report = json.loads(out.read_text())
    hist = load_histogram(url)
    assert report["workload"]["source"] == url
    assert {int(b): n for b, n in report["workload"]["histogram"].items()} == hist
    rec = report["recommendations"]["FULL_DECODE_ONLY"]
    assert 1 <= len(rec["sizes"]) <= 2 and max(rec["sizes"]) <= max(hist)
    assert set(rec["sizes"]) <= set(hist)  # sizes are chosen among the served batch sizes

"""`vgraph bench serve`: drive a running server with random prompts; print vLLM's serving table.

vLLM's flag names: N prompts of --random-input-len random token ids each (--dataset-name
random) go to /v1/completions, or as text (the server's /detokenize of the ids) in one user
message to /v1/chat/completions, as streaming requests (--random-output-len tokens, ignore_eos
by default, greedy), either at --request-rate requests per second (Poisson arrivals; inf = all
at once) and/or capped at --max-concurrency in flight. Per request it times the first token
(TTFT), the gaps between streamed tokens (ITL), the time per output token after the first (TPOT)
and the whole request (E2E); token counts come from the stream's usage. Mean, median, std and
the --metric-percentiles (numpy's percentile, linear interpolation, as vLLM) of each; prints the
table, the errors of failed requests, and writes the numbers as JSON with --save-result or
--result-filename (in --result-dir, made if missing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx
import msgspec
import numpy as np

from vgraph.bench.args import nonneg_int, percentile_list, positive_float, positive_int

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
METRICS = {  # name -> the title of its section in the table
    "ttft": "Time to First Token",
    "tpot": "Time per Output Token (excl. 1st token)",
    "itl": "Inter-token Latency",
    "e2el": "End-to-end Latency",
}


def add_cli_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--base-url", default=None, help="server to drive (default: --host, --port)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--endpoint",
        default=COMPLETIONS,
        choices=[COMPLETIONS, CHAT],
        help="completions: the token ids as the prompt; chat: the prompt's text (the server's "
        "/detokenize of the ids) as one user message, as vLLM's --backend openai-chat",
    )
    p.add_argument("--model", default=None, help="model name (default: the server's first)")
    p.add_argument("--api-key", default=os.environ.get("VGRAPH_API_KEY"))
    p.add_argument("--num-prompts", type=positive_int, default=100)
    p.add_argument("--dataset-name", default="random", choices=["random"], help="prompts' source")
    p.add_argument(
        "--random-input-len",
        "--input-len",
        dest="input_len",
        type=positive_int,
        default=1024,
        help="prompt length in tokens (default: 1024, as vLLM)",
    )
    p.add_argument(
        "--random-output-len",
        "--output-len",
        dest="output_len",
        type=positive_int,
        default=128,
        help="max_tokens of each request (default: 128)",
    )
    p.add_argument(
        "--vocab-size",
        type=positive_int,
        default=512,
        help="prompt token ids are drawn from [0, vocab-size)",
    )
    p.add_argument(
        "--request-rate",
        type=positive_float,
        default=float("inf"),
        help="requests per second, Poisson arrivals (default: inf, all at once)",
    )
    p.add_argument(
        "--max-concurrency", type=positive_int, default=None, help="most requests in flight"
    )
    p.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="generate exactly --output-len tokens (default: on)",
    )
    p.add_argument("--seed", type=nonneg_int, default=0)
    p.add_argument(
        "--percentile-metrics",
        type=metric_list,
        default="ttft,tpot,itl",
        help=f"comma-separated metrics to report percentiles of: {', '.join(METRICS)}",
    )
    p.add_argument(
        "--metric-percentiles",
        type=percentile_list,
        default="99",
        help="comma-separated percentiles to report, each in 0..100 (numpy's, linear "
        "interpolation)",
    )
    p.add_argument("--save-result", action="store_true", help="write the results as JSON")
    p.add_argument(
        "--result-dir", default=".", help="folder of the JSON, created if missing (default: .)"
    )
    p.add_argument(
        "--result-filename",
        "--result-file",
        dest="result_file",
        default=None,
        help="JSON file name (implies --save-result; default: vgraph-bench-serve.json)",
    )
    return p


def metric_list(text: str) -> list[str]:
    """--percentile-metrics: comma-separated names of METRICS (an argparse type)."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown)} unknown; choose from {', '.join(METRICS)}"
        )
    return names


@dataclass
class RequestResult:
    success: bool = False
    error: str = ""
    prompt_len: int = 0
    output_tokens: int = 0
    ttft: float = 0.0  # seconds
    e2e: float = 0.0
    itl: list[float] = field(default_factory=list)


async def send_request(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], prompt_len: int
) -> RequestResult:
    res = RequestResult(prompt_len=prompt_len)
    start = last = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                await resp.aread()
                res.error = f"HTTP {resp.status_code}: {error_message(resp)}"
                return res
            # SSE events split from the raw bytes (an event may span reads) and decoded by
            # msgspec: less client work per event than httpx's text line iterator and
            # json.loads, for one process reading many streams. The events of one read arrived
            # together: they share its timestamp.
            pending = b""
            async for data in resp.aiter_bytes():
                now = time.perf_counter()
                *events, pending = (pending + data).replace(b"\r\n", b"\n").split(b"\n\n")
                for event in events:
                    if not event.startswith(b"data: ") or event == b"data: [DONE]":
                        continue
                    chunk = msgspec.json.decode(event[len(b"data: ") :])
                    if "error" in chunk:
                        res.error = chunk["error"].get("message", "error")
                        return res
                    choices = chunk.get("choices")
                    # a chat stream opens with a chunk of the role alone: no token yet
                    if choices and "role" not in choices[0].get("delta", {}):
                        if res.ttft == 0.0:
                            res.ttft = now - start
                        else:
                            res.itl.append(now - last)
                        last = now
                    if usage := chunk.get("usage"):
                        res.output_tokens = usage["completion_tokens"]
                        # a chat prompt's tokens are its text's and the template's
                        res.prompt_len = usage.get("prompt_tokens", res.prompt_len)
        res.e2e = time.perf_counter() - start
        res.success = True
    except (httpx.HTTPError, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    return res


async def served_model(client: httpx.AsyncClient, args: argparse.Namespace) -> str:
    """--model, else the server's first model. /v1/models is asked even when --model names it:
    the client's first request pays its own set-up (about 30 ms), which must not land in the
    first prompt's TTFT, and a server that refuses it (a wrong API key) would refuse every
    request. ValueError, with the server's message, when it does not answer 200."""
    resp = await client.get("/v1/models")
    if resp.status_code != 200:
        hint = ""
        if resp.status_code in (401, 403):
            hint = " (give the server's API key with --api-key or VGRAPH_API_KEY)"
        raise ValueError(
            f"GET {resp.url} answered HTTP {resp.status_code}: {error_message(resp)}{hint}"
        )
    if args.model:
        return args.model
    data = resp.json().get("data") or []
    if not data:
        raise ValueError(f"GET {resp.url} lists no models; name one with --model")
    return data[0]["id"]


def error_message(resp: httpx.Response) -> str:
    """The message of an OpenAI-style error body, else the body's first 200 characters."""
    try:
        error = resp.json()["error"]
        return error["message"] if isinstance(error, dict) else str(error)
    except (ValueError, KeyError, TypeError):
        return resp.text[:200] or "(empty body)"


async def prompt_texts(client: httpx.AsyncClient, model: str, prompts: list[list[int]]) -> list:
    """The chat endpoint takes text: each prompt's ids decoded by the server's /detokenize (vLLM
    decodes them with its own copy of the tokenizer), before the clock starts."""
    texts = []
    for ids in prompts:
        resp = await client.post("/detokenize", json={"model": model, "tokens": ids})
        if resp.status_code != 200:
            raise ValueError(
                f"POST {resp.url} (the chat prompts' text) answered HTTP {resp.status_code}: "
                f"{error_message(resp)}"
            )
        texts.append(resp.json()["prompt"])
    return texts


def request_body(args: argparse.Namespace, model: str, prompt: list[int] | str) -> dict[str, Any]:
    """A streamed, greedy request of --output-len tokens in the endpoint's shape."""
    body: dict[str, Any] = {"model": model}
    if args.endpoint == CHAT:
        body |= {"messages": [{"role": "user", "content": prompt}]}
        body |= {"max_completion_tokens": args.output_len}
    else:
        body |= {"prompt": prompt, "max_tokens": args.output_len}
    return body | {
        "temperature": 0.0,
        "ignore_eos": args.ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    base_url = args.base_url or f"http://{args.host}:{args.port}"
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=None, limits=limits
    ) as client:
        model = await served_model(client, args)
        ids = [
            [rng.randrange(args.vocab_size) for _ in range(args.input_len)]
            for _ in range(args.num_prompts)
        ]
        prompts = await prompt_texts(client, model, ids) if args.endpoint == CHAT else ids
        gate = asyncio.Semaphore(args.max_concurrency or args.num_prompts or 1)

        async def one(prompt: list[int] | str) -> RequestResult:
            async with gate:
                body = request_body(args, model, prompt)
                return await send_request(client, args.endpoint, body, args.input_len)

        tasks = []
        start = time.perf_counter()
        for prompt in prompts:
            tasks.append(asyncio.create_task(one(prompt)))
            if args.request_rate != float("inf"):
                await asyncio.sleep(rng.expovariate(args.request_rate))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
    return summarize(args, model, results, duration, base_url)


def summarize(
    args: argparse.Namespace,
    model: str,
    results: list[RequestResult],
    duration: float,
    base_url: str = "",
) -> dict[str, Any]:
    ok = [r for r in results if r.success]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    report: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": model,
        "base_url": base_url,
        "num_prompts": args.num_prompts,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "request_rate": str(args.request_rate),
        "max_concurrency": args.max_concurrency,
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "errors": sorted({r.error for r in results if r.error}),
        "duration": duration,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
    }
    tpots = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    series = {
        "ttft": [r.ttft for r in ok],
        "tpot": tpots,
        "itl": [x for r in ok for x in r.itl],
        "e2el": [r.e2e for r in ok],
    }
    for name, values in series.items():
        ms = np.array([v * 1000 for v in values] or [0.0])
        report[f"mean_{name}_ms"] = float(np.mean(ms))
        report[f"median_{name}_ms"] = float(np.median(ms))
        report[f"std_{name}_ms"] = float(np.std(ms))
        for p in args.metric_percentiles:
            report[f"p{p:g}_{name}_ms"] = float(np.percentile(ms, p))
    report["requests"] = [asdict(r) | {"itl": None} for r in results]
    return report


def print_table(r: dict[str, Any], metrics: list[str], percentiles: list[float]) -> None:
    print("{s:{c}^50}".format(s=" Serving Benchmark Result ", c="="))
    rows = [
        ("Successful requests:", r["completed"]),
        ("Failed requests:", r["failed"]),
        ("Benchmark duration (s):", r["duration"]),
        ("Total input tokens:", r["total_input_tokens"]),
        ("Total generated tokens:", r["total_output_tokens"]),
        ("Request throughput (req/s):", r["request_throughput"]),
        ("Output token throughput (tok/s):", r["output_throughput"]),
        ("Total Token throughput (tok/s):", r["total_token_throughput"]),
    ]
    for label, value in rows:
        print(f"{label:<40}{value:<10.2f}" if isinstance(value, float) else f"{label:<40}{value}")
    for name, title in METRICS.items():
        if name not in metrics:
            continue
        print("{s:{c}^50}".format(s=title, c="-"))
        stats = [("mean", "Mean"), ("median", "Median")] + [
            (f"p{p:g}", f"P{p:g}") for p in percentiles
        ]
        for key, label in stats:
            label = f"{label} {name.upper()} (ms):"
            print(f"{label:<40}{r[f'{key}_{name}_ms']:<10.2f}")
    print("=" * 50)


def print_errors(results: list[dict[str, Any]], shown: int = 5) -> None:
    """Why requests failed: each distinct error with its count, the most frequent first."""
    counts = Counter(q["error"] for q in results if not q["success"])
    print(f"Errors of failed requests ({len(counts)} distinct):", file=sys.stderr)
    for error, n in counts.most_common(shown):
        print(f"  {n} x {error}", file=sys.stderr)
    if len(counts) > shown:
        print(f"  ... and {len(counts) - shown} more (all in the JSON's errors)", file=sys.stderr)


def main(args: argparse.Namespace) -> int:
    path = None
    if args.save_result or args.result_file:
        # made before the run, as vLLM makes it: a folder that can't be made fails here, not
        # after every request was sent
        try:
            os.makedirs(args.result_dir, exist_ok=True)
        except OSError as e:
            print(
                f"vgraph bench serve: error: --result-dir {args.result_dir}: {e}", file=sys.stderr
            )
            return 1
        path = os.path.join(args.result_dir, args.result_file or "vgraph-bench-serve.json")
    try:
        report = asyncio.run(run_benchmark(args))
    except httpx.TransportError as e:  # no server there (each request's own errors are counted)
        url = args.base_url or f"http://{args.host}:{args.port}"
        print(f"vgraph bench serve: error: no server answers at {url}: {e!r}", file=sys.stderr)
        return 1
    except ValueError as e:  # the server refused to list its models or decode the prompts
        print(f"vgraph bench serve: error: {e}", file=sys.stderr)
        return 1
    print_table(report, args.percentile_metrics, args.metric_percentiles)
    if report["failed"]:
        print_errors(report["requests"])
    if path is not None:
        with open(path, "w") as f:
            json.dump(report, f, indent=2)
        print(f"results written to {path}")
    return 0 if report["failed"] == 0 else 1

"""`vgraph bench sweep`: capture lists x graph modes on one workload, and the list to capture.

Every candidate (a cudagraph mode and its capture lists, plus the eager NONE baseline) is an
in-process engine core, and all stay alive, so the candidates are timed in turns (as in
`vgraph bench step`): host noise falls on all alike. Per candidate:
  1. start-up: seconds (compile and capture apart), graphs, graph memory and the KV blocks it
     would have bought (graph bytes / bytes per KV block);
  2. the padding sawtooth: one decode step of B requests over a really prefilled KV cache for
     every B from 1 to the measured range (the workload's largest batch, or the size the fixed
     lists pad it to), median ms, the runtime mode and the size it ran at;
  3. end to end, per concurrency level: `concurrency` requests of input_len prompt tokens and
     output_len generated tokens (ignore_eos) through the real scheduler, in rounds; output
     tokens/s, median TPOT, padded-token waste and eager fallbacks (from GraphStats).
The workload's expected step time (its mean TPOT) weighs the sawtooth by the workload's
batch-size histogram: from the concurrency levels, a file or a server's /metrics (workload.py).
With `recommended` among the lists, the `all` candidate and the eager baseline are measured
first, vgraph/bench/capture_plan.py picks the list, and it is then swept like the others. Writes
JSON (--out), PNG plots (sweep_plots.py) and a table; a candidate that fails to start is
recorded with its error and the others still run.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import traceback
from typing import Any

import torch

from vgraph.bench import sweep_report, workload
from vgraph.bench.common import (
    BLOCK_SIZE,
    StepBuilder,
    add_engine_args,
    engine_config,
    startup_result,
    time_in_turns,
    used_mode,
)
from vgraph.bench.sweep_candidates import (
    RECOMMENDED,
    Candidate,
    build_candidates,
    default_sizes,
    parse_list,
)
from vgraph.engine.core import EngineCore
from vgraph.engine.protocol import EngineCoreRequest
from vgraph.sampling_params import SamplingParams
from vgraph.utils import cdiv


def add_cli_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_engine_args(p)
    p.add_argument(
        "--modes", nargs="+", default=["FULL_DECODE_ONLY", "PIECEWISE"], help="cudagraph modes"
    )
    p.add_argument(
        "--lists",
        nargs="+",
        default=["default", "pow2", RECOMMENDED],
        help="capture lists: '1,2,4,8', default, pow2, pow2:N, all, all:N, recommended",
    )
    p.add_argument(
        "--piecewise-lists",
        nargs="+",
        default=None,
        help="PIECEWISE sizes apart (as --lists, no recommended): the lists of PIECEWISE, a "
        "second axis for FULL_AND_PIECEWISE (default: the capture list)",
    )
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 6, 24, 48])
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--workload-file", default=None, help="batch-size histogram: JSON or saved /metrics text"
    )
    src.add_argument(
        "--workload-url", default=None, help="a server's /metrics: its decode batch histogram"
    )
    p.add_argument(
        "--context-len",
        type=int,
        default=None,
        help="sawtooth KV tokens per request (default: input_len + output_len / 2)",
    )
    p.add_argument("--max-num-seqs", type=int, default=256, help="as `vgraph serve`")
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-sizes", type=int, default=8, help="recommended: at most K sizes")
    p.add_argument("--memory-budget-mib", type=float, default=None, help="recommended: budget")
    p.add_argument("--num-iters", type=int, default=20, help="timed steps per batch size")
    p.add_argument("--num-warmup", type=int, default=3)
    p.add_argument("--num-rounds", type=int, default=3, help="end-to-end runs per level")
    p.add_argument("--out", default=None, help="write results as JSON here")
    p.add_argument("--plot-dir", default=None, help="PNG plots here (default: beside --out)")
    return p


def histogram_of(args: argparse.Namespace) -> tuple[dict[int, float], str]:
    source = args.workload_file or args.workload_url
    if source:
        return workload.load_histogram(source), source
    return workload.from_concurrency(args.concurrency, args.output_len), "concurrency"


def measured_range(args: argparse.Namespace, hist: dict[int, float], default: tuple) -> int:
    """Largest batch of the sawtooth: the workload's, or what a fixed list pads it to."""
    top = max(hist)
    if top > args.max_num_seqs:
        raise ValueError(
            f"--max-num-seqs={args.max_num_seqs} is below the workload's batch size {top}"
        )
    reach = top
    for spec in list(args.lists) + list(args.piecewise_lists or []):
        if spec != RECOMMENDED:
            sizes = parse_list(spec, "--lists", top, default)
            reach = max([reach] + [s for s in sizes if s >= top][:1])
    return min(reach, args.max_num_seqs)


def start(args: argparse.Namespace, cand: Candidate, top: int) -> None:
    """Start the candidate's engine and hand-build its decode steps of 1..top requests."""
    t0 = time.perf_counter()
    ctx = args.context_len
    config = engine_config(
        args,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_gpu_blocks_override=top * cdiv(ctx + 1, BLOCK_SIZE)
        + max(args.concurrency) * cdiv(args.input_len + args.output_len, BLOCK_SIZE)
        + cdiv(args.max_model_len, BLOCK_SIZE),
        compilation_config=cand.compilation_config(),
    )
    core = cand.core = EngineCore(config)
    r = cand.result
    r.update(startup_result(core, time.perf_counter() - t0))
    comp, g, runner = config.compilation_config, core.runner.graph_stats, core.runner
    r["capture_sizes"] = list(comp.cudagraph_capture_sizes or ())
    r["piecewise_sizes"] = list(comp.piecewise_capture_sizes or ())
    r["graph_memory_per_size"] = {str(s): b for s, b in g.graph_memory_bytes_per_size.items()}
    kv_bytes = sum(t.numel() * t.element_size() for t in runner.kv_caches.values())
    r["kv_block_bytes"] = kv_bytes / (runner.num_blocks + 1)  # one spare block for pad writes
    r["graph_kv_blocks"] = g.graph_memory_bytes / r["kv_block_bytes"]
    b = StepBuilder(core)
    cand.requests = b.prefilled(top, ctx)
    cand.steps = {n: b.step(cand.requests[:n], [1] * n) for n in range(1, top + 1)}


def start_all(args: argparse.Namespace, cands: list[Candidate], top: int) -> list[Candidate]:
    """Start each candidate; one that fails is recorded with its error. -> the started ones."""
    started = []
    for cand in cands:
        cand.result = {"name": cand.name, "mode": cand.mode, "list": cand.list_name}
        cand.result["requested_sizes"] = None if cand.sizes is None else list(cand.sizes)
        if cand.piecewise_name is not None:
            cand.result["piecewise_list"] = cand.piecewise_name
        try:
            start(args, cand, top)
            started.append(cand)
        except Exception as e:  # one broken candidate must not cost the others' numbers
            traceback.print_exc()
            cand.result["error"] = f"{type(e).__name__}: {e}"
            cand.core = None
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return started


def measure_steps(args: argparse.Namespace, cands: list[Candidate]) -> None:
    """The sawtooth: every batch size, the candidates in turns; medians go to the results."""
    for n in cands[0].steps:
        stats = [c.core.runner.graph_stats for c in cands]
        before = [(dict(g.steps), dict(g.padded_decode_batch_sizes)) for g in stats]
        calls = [lambda r=c.core.runner, s=c.steps[n]: r.execute_model(s) for c in cands]
        # one step of each candidate in turn: a slow spell of the host falls on all alike
        timed = time_in_turns(calls, args.num_iters, args.num_warmup, block=1)
        for c, g, times, (steps, padded) in zip(cands, stats, timed, before):
            c.step_times[n] = times
            grown = [s for s, k in g.padded_decode_batch_sizes.items() if k > padded.get(s, 0)]
            r = c.result
            r.setdefault("step_ms", {})[n] = statistics.median(times)
            r.setdefault("step_mode", {})[n] = used_mode(steps, g.steps)
            r.setdefault("step_padded", {})[n] = max(grown)


def generate(core: EngineCore, num: int, args: argparse.Namespace, out_len: int, tag: str):
    """num requests at once, in lockstep to the end -> (seconds, TPOT ms of each request)."""
    gen = torch.Generator().manual_seed(num)
    vocab = core.config.model_config.vocab_size
    params = SamplingParams(max_tokens=out_len, ignore_eos=True, temperature=0)
    for i in range(num):
        ids = torch.randint(0, vocab, (args.input_len,), generator=gen).tolist()
        core.add_request(EngineCoreRequest(f"{tag}-{i}", ids, params, []))
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    t0 = time.perf_counter()
    while core.has_unfinished_requests():
        outputs = core.step().outputs
        now = time.perf_counter()
        for o in outputs:
            first.setdefault(o.request_id, now)
            last[o.request_id] = now
    elapsed = time.perf_counter() - t0
    tpots = [(last[r] - first[r]) * 1e3 / (out_len - 1) for r in first] if out_len > 1 else []
    return elapsed, tpots


def measure_e2e(args: argparse.Namespace, cands: list[Candidate]) -> None:
    """Every concurrency level: a short warm-up run each, then rounds, the candidates in turn."""
    for level in args.concurrency:
        for c in cands:
            generate(c.core, level, args, min(args.output_len, 4), f"warm{level}")
        before = [c.core.runner.graph_stats.snapshot() for c in cands]
        runs: list[list[tuple[float, list[float]]]] = [[] for _ in cands]
        for rnd in range(args.num_rounds):
            for c, got in zip(cands, runs):
                got.append(generate(c.core, level, args, args.output_len, f"c{level}r{rnd}"))
        for c, got, g0 in zip(cands, runs, before):
            c.result.setdefault("e2e", {})[level] = e2e_figures(
                level, args.output_len, got, g0, c.core.runner.graph_stats
            )


def e2e_figures(level: int, output_len: int, runs: list, g0: Any, g1: Any) -> dict[str, Any]:
    """One level's rounds and the GraphStats delta over them -> the level's figures."""
    decode = {b: n - g0.decode_batch_sizes.get(b, 0) for b, n in g1.decode_batch_sizes.items()}
    padded = {
        b: n - g0.padded_decode_batch_sizes.get(b, 0)
        for b, n in g1.padded_decode_batch_sizes.items()
    }
    real_tokens = sum(b * n for b, n in decode.items())
    return {
        "output_tok_s": statistics.median(level * output_len / s for s, _ in runs),
        "tpot_ms": statistics.median(t for _, tpots in runs for t in tpots),
        "elapsed_s": [s for s, _ in runs],
        "padded_tokens": g1.padded_tokens - g0.padded_tokens,
        "decode_pad_waste_pct": 100 * (sum(b * n for b, n in padded.items()) / real_tokens - 1)
        if real_tokens
        else 0.0,
        # per EagerReason; "unsupported" counts the prefill steps FULL_DECODE_ONLY runs eagerly
        "eager_fallbacks": {
            k: n - g0.eager_fallbacks.get(k, 0) for k, n in g1.eager_fallbacks.items()
        },
    }


def release(cands: list[Candidate]) -> None:
    """Give the hand-built steps' KV blocks back before the end-to-end runs."""
    for c in cands:
        for req in c.requests:
            c.core.scheduler.kv.free(req)
        c.requests, c.steps = [], {}


def check_args(args: argparse.Namespace) -> None:
    for name, low in (("input_len", 1), ("output_len", 2), ("num_iters", 1), ("num_rounds", 1)):
        if getattr(args, name) < low:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag}={getattr(args, name)} must be >= {low}")
    if min(args.concurrency) < 1:
        raise ValueError(f"--concurrency {args.concurrency}: every level must be >= 1")


def main(args: argparse.Namespace) -> dict[str, Any]:
    try:
        check_args(args)
        hist, source = histogram_of(args)
        default = default_sizes(args.max_num_seqs, args.max_num_batched_tokens)
        top = measured_range(args, hist, default)
        cands = build_candidates(
            args.modes, args.lists, args.piecewise_lists, max(hist), default, top
        )
    except ValueError as e:
        raise SystemExit(f"bench sweep: {e}") from None
    if args.context_len is None:
        args.context_len = args.input_len + args.output_len // 2
    args.max_model_len = max(args.input_len + args.output_len, args.context_len + 1)
    rep = sweep_report.Report(args, hist, source, default)
    fixed = [c for c in cands if c.list_name != RECOMMENDED]
    started = start_all(args, fixed, top)
    rep.write([c.result for c in cands])
    pending = [c for c in cands if c.list_name == RECOMMENDED]
    if pending:
        every = tuple(range(1, top + 1))
        basis = [c for c in started if c.mode == "NONE" or c.sizes == every]
        measure_steps(args, basis)  # the per-size latencies the optimiser uses, measured once
        rep.plan(basis, pending)
        started += start_all(args, [c for c in pending if c.sizes is not None], top)
    if started:
        measure_steps(args, started)
        release(started)
        measure_e2e(args, started)
    for c in started:
        c.core.shutdown()
    report = rep.finish(cands)
    failed = [c.name for c in cands if "error" in c.result]
    if failed:
        raise SystemExit(f"bench sweep: candidate(s) {', '.join(failed)} failed")
    return report


if __name__ == "__main__":
    main(add_cli_args(argparse.ArgumentParser(description=__doc__)).parse_args())

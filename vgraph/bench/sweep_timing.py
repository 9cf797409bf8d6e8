"""The sweep's timing: one engine per cudagraph mode, capturing the union of that mode's
candidates' capture lists, and on it one lane per candidate. It measures no start-up figures
(each candidate's own engine does, in sweep.py) and chooses no list.

Why one engine per mode: on the H200, engines that replayed the very same graphs timed about 3%
apart (benchmarks/results/2026-12-01-h200-sweep2), each with its own weights, KV cache and graph
pool, and taking turns did not cancel it: more than the differences between capture lists the
sweep must resolve. A graph of a size is the same computation whatever list it was captured for,
so a candidate timed on the shared engine runs its own graphs, and identical graphs time alike.

A lane is one candidate on its mode's engine, with three things of its own that activate() puts
into the engine before each of the lane's steps:
  1. the dispatcher restricted to the candidate's lists (CudagraphDispatcher.restricted): every
     step pads, picks graphs and falls back to eager as in the candidate's own engine;
  2. a Scheduler over the engine's KV cache manager: no two lanes' requests share a batch, and a
     lane's batches are those its own engine would schedule, because the KV pool holds every
     lane's requests at once (no lane preempts) and prefix caching is off (no lane's prefill
     hits blocks that another lane computed);
  3. a GraphStats: what its steps ran (runtime modes, padded sizes, eager fallbacks).
The eager NONE baseline is an engine of its own, with one lane.

Timing runs every lane of every engine in turn, one step each, in a new random order every turn,
so that a slow spell of the host falls on all alike and no lane always follows the same one:
  - the sawtooth: hand-built decode steps of 1..top requests over a prefilled KV cache (one set
    per engine, run by each of its lanes), medians over num_iters;
  - end to end, per concurrency level: every lane gets the level's requests, then one step() of
    each lane in turn until all are done. A lane's round time is the sum of its own step times,
    and its TPOT is read on that clock; figures are medians over the rounds.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from vgraph.bench.common import (
    BLOCK_SIZE,
    StepBuilder,
    engine_config,
    startup_result,
    time_in_turns,
    used_mode,
)
from vgraph.bench.sweep_candidates import Candidate
from vgraph.core.kv_cache_manager import KVCacheManager
from vgraph.core.scheduler import Scheduler, SchedulerOutput
from vgraph.cudagraph.counters import GraphStats
from vgraph.cudagraph.dispatcher import CudagraphDispatcher
from vgraph.engine.core import EngineCore
from vgraph.engine.protocol import EngineCoreRequest
from vgraph.request import Request
from vgraph.sampling_params import SamplingParams
from vgraph.utils import cdiv

TIMING = (
    "one engine per mode holding the union of the candidates' graphs; each candidate timed on "
    "it with the dispatcher restricted to its own lists, its own scheduler and GraphStats; "
    "sawtooth and end-to-end rounds one step of each candidate in turn (end to end: summed "
    "step times); start-up, graphs and graph memory from each candidate's own engine"
)


def start_core(
    args: argparse.Namespace, compilation_config: dict[str, Any], top: int, num_lanes: int
) -> tuple[EngineCore, float]:
    """An in-process engine of the sweep -> (core, start-up seconds). Its KV pool holds the
    sawtooth's top requests, or (their blocks given back first) num_lanes lanes' largest level
    at once, plus one request of max_model_len; prefix caching is off (see the docstring)."""
    sawtooth = top * cdiv(args.context_len + 1, BLOCK_SIZE)
    e2e = num_lanes * max(args.concurrency) * cdiv(args.input_len + args.output_len, BLOCK_SIZE)
    t0 = time.perf_counter()
    config = engine_config(
        args,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_gpu_blocks_override=max(sawtooth, e2e) + cdiv(args.max_model_len, BLOCK_SIZE),
        enable_prefix_caching=False,
        compilation_config=compilation_config,
    )
    core = EngineCore(config)
    return core, time.perf_counter() - t0


@dataclass
class TimingEngine:
    """One mode's engine: the union of its candidates' lists, and the sawtooth's steps."""

    mode: str
    core: EngineCore
    dispatcher: CudagraphDispatcher  # the engine's own, over the union
    kv: KVCacheManager
    requests: list[Request]  # the sawtooth's, prefilled
    steps: dict[int, SchedulerOutput]  # batch -> one decode step of that many requests
    result: dict[str, Any]  # for the JSON: the union lists and the engine's start-up figures


def start_engine(
    args: argparse.Namespace,
    mode: str,
    lists: list[tuple[list[int], list[int]]],
    top: int,
    num_lanes: int,
) -> TimingEngine:
    """mode's timing engine, capturing the union of `lists` (each candidate's capture and
    piecewise sizes as its own engine resolved them), with the sawtooth's steps built."""
    cc: dict[str, Any] = {"cudagraph_mode": mode}
    if mode != "NONE":
        cc["cudagraph_capture_sizes"] = sorted({s for full, _ in lists for s in full})
        cc["piecewise_capture_sizes"] = sorted({s for _, pw in lists for s in pw})
    core, seconds = start_core(args, cc, top, num_lanes)
    comp = core.config.compilation_config
    result = startup_result(core, seconds)
    graphs = mode != "NONE"
    result.update(
        capture_sizes=list(comp.cudagraph_capture_sizes or ()) if graphs else [],
        piecewise_sizes=list(comp.piecewise_capture_sizes or ()) if graphs else [],
        num_lanes=num_lanes,
        num_kv_blocks=core.runner.num_blocks,
    )
    b = StepBuilder(core)
    requests = b.prefilled(top, args.context_len)
    steps = {n: b.step(requests[:n], [1] * n) for n in range(1, top + 1)}
    return TimingEngine(
        mode, core, core.runner.dispatcher, core.scheduler.kv, requests, steps, result
    )


@dataclass
class Lane:
    """One candidate on its mode's timing engine."""

    cand: Candidate
    engine: TimingEngine
    dispatcher: CudagraphDispatcher  # restricted to the candidate's lists
    scheduler: Scheduler  # its own requests, over the engine's KV cache manager
    graph_stats: GraphStats = field(default_factory=GraphStats)

    def activate(self) -> None:
        """Make the engine the candidate's for the next steps."""
        core = self.engine.core
        core.scheduler = self.scheduler
        core.runner.dispatcher = self.dispatcher
        core.runner.graph_stats = self.graph_stats


def add_lane(engine: TimingEngine, cand: Candidate) -> Lane:
    """cand's lane, from the lists its own engine resolved; ValueError if the engine lacks one
    of its graphs."""
    r = cand.result
    dispatcher = engine.dispatcher.restricted(r["capture_sizes"], r["piecewise_sizes"])
    scheduler = Scheduler(engine.core.config.scheduler_config, engine.kv)
    return Lane(cand, engine, dispatcher, scheduler)


def measure_steps(args: argparse.Namespace, lanes: list[Lane]) -> None:
    """The sawtooth: every batch size, one step of each lane in turn; the medians, the runtime
    mode and the size each step ran at go to the candidates' results."""
    rng = random.Random(0)
    for n in lanes[0].engine.steps:
        stats = [lane.graph_stats for lane in lanes]
        before = [(dict(g.steps), dict(g.padded_decode_batch_sizes)) for g in stats]
        calls = [
            functools.partial(lane.engine.core.runner.execute_model, lane.engine.steps[n])
            for lane in lanes
        ]
        setups = [lane.activate for lane in lanes]
        timed = time_in_turns(calls, args.num_iters, args.num_warmup, 1, setups, rng)
        for lane, g, times, (steps, padded) in zip(lanes, stats, timed, before):
            grown = [s for s, k in g.padded_decode_batch_sizes.items() if k > padded.get(s, 0)]
            r = lane.cand.result
            r.setdefault("step_ms", {})[n] = statistics.median(times)
            r.setdefault("step_mode", {})[n] = used_mode(steps, g.steps)
            r.setdefault("step_padded", {})[n] = max(grown)


def release(engines: list[TimingEngine]) -> None:
    """Give the sawtooth's KV blocks back before the end-to-end runs."""
    for e in engines:
        for req in e.requests:
            e.kv.free(req)
        e.requests, e.steps = [], {}


def run_round(
    lanes: list[Lane],
    num: int,
    args: argparse.Namespace,
    out_len: int,
    tag: str,
    rng: random.Random,
) -> list[tuple[float, list[float]]]:
    """num requests on every lane, in lockstep to the end, one step() of each lane in turn ->
    per lane (the sum of its step seconds, TPOT ms of each of its requests)."""
    gen = torch.Generator().manual_seed(num)
    vocab = lanes[0].engine.core.config.model_config.vocab_size
    prompts = [
        torch.randint(0, vocab, (args.input_len,), generator=gen).tolist() for _ in range(num)
    ]
    params = SamplingParams(max_tokens=out_len, ignore_eos=True, temperature=0)
    for k, lane in enumerate(lanes):
        lane.activate()
        for i, ids in enumerate(prompts):
            lane.engine.core.add_request(EngineCoreRequest(f"{tag}-{k}-{i}", ids, params, []))
    clock = [0.0] * len(lanes)  # each lane's summed step seconds
    first: list[dict[str, float]] = [{} for _ in lanes]
    last: list[dict[str, float]] = [{} for _ in lanes]
    live = list(range(len(lanes)))
    while live:
        rng.shuffle(live)
        for k in live:
            lanes[k].activate()
            t0 = time.perf_counter()
            outputs = lanes[k].engine.core.step().outputs
            clock[k] += time.perf_counter() - t0
            for o in outputs:
                first[k].setdefault(o.request_id, clock[k])
                last[k][o.request_id] = clock[k]
        live = [k for k in live if lanes[k].scheduler.has_unfinished_requests()]
    if out_len < 2:
        return [(c, []) for c in clock]
    return [
        (c, [(la[r] - fi[r]) * 1e3 / (out_len - 1) for r in fi])
        for c, fi, la in zip(clock, first, last)
    ]


def measure_e2e(args: argparse.Namespace, lanes: list[Lane]) -> None:
    """Every concurrency level: a short warm-up round, then num_rounds rounds of all lanes."""
    rng = random.Random(1)
    for level in args.concurrency:
        run_round(lanes, level, args, min(args.output_len, 4), f"warm{level}", rng)
        before = [lane.graph_stats.snapshot() for lane in lanes]
        runs: list[list[tuple[float, list[float]]]] = [[] for _ in lanes]
        for rnd in range(args.num_rounds):
            got = run_round(lanes, level, args, args.output_len, f"c{level}r{rnd}", rng)
            for mine, run in zip(runs, got):
                mine.append(run)
        for lane, mine, g0 in zip(lanes, runs, before):
            lane.cand.result.setdefault("e2e", {})[level] = e2e_figures(
                level, args.output_len, mine, g0, lane.graph_stats
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
        "elapsed_s": [s for s, _ in runs],  # each round's summed step seconds
        "padded_tokens": g1.padded_tokens - g0.padded_tokens,
        # decode steps per batch size (requests), and per size they ran at
        "decode_batches": {b: n for b, n in decode.items() if n},
        "padded_decode_batches": {b: n for b, n in padded.items() if n},
        "decode_pad_waste_pct": 100 * (sum(b * n for b, n in padded.items()) / real_tokens - 1)
        if real_tokens
        else 0.0,
        # per EagerReason; "unsupported" counts the prefill steps FULL_DECODE_ONLY runs eagerly
        "eager_fallbacks": {
            k: n - g0.eager_fallbacks.get(k, 0) for k, n in g1.eager_fallbacks.items()
        },
    }

"""`vgraph bench sweep`: capture lists x graph modes on one workload, and the list to capture.

The candidates are a cudagraph mode and its capture lists each, plus the eager NONE baseline.
  1. start-up, per candidate in its own in-process engine, built, measured and freed one at a
     time: seconds (compile and capture apart), graphs, graph memory per size and the KV blocks
     it would have bought (graph bytes / bytes per KV block): these depend on the list alone;
  2. timing, on one engine per mode that captured the union of that mode's lists, each
     candidate with the dispatcher restricted to its own lists (sweep_timing.py says why and
     how), all candidates one step each in turn:
     a. the padding sawtooth: one decode step of B requests over a really prefilled KV cache
        for every B from 1 to the measured range (the workload's largest batch, or the size the
        fixed lists pad it to), median ms, the runtime mode and the size it ran at;
     b. end to end, per concurrency level: `concurrency` requests of input_len prompt tokens and
        output_len generated tokens (ignore_eos) through a real scheduler of the candidate's
        own, in rounds; output tokens/s and median TPOT from its summed step times, padded-token
        waste and eager fallbacks (from its GraphStats).
The workload's expected step time (its mean TPOT) weighs the sawtooth by the workload's
batch-size histogram: from the concurrency levels, a file or a server's /metrics (workload.py).
With `recommended` among the lists, the `all` candidate and the eager baseline are timed first,
vgraph/bench/capture_plan.py picks the list (its sizes are among the `all` list's, so the timing
engine holds its graphs already), and it is then started and timed like the others. Writes JSON
(--out), PNG plots (sweep_plots.py) and a table; a candidate that fails to start is recorded with
its error and the others still run.
"""

from __future__ import annotations

import argparse
import gc
import traceback
from typing import Any

import torch

from vgraph.bench import sweep_report, sweep_timing, workload
from vgraph.bench.args import nonneg_int, positive_float, positive_int
from vgraph.bench.common import add_engine_args, startup_result
from vgraph.bench.sweep_candidates import (
    RECOMMENDED,
    Candidate,
    build_candidates,
    default_sizes,
    parse_list,
)


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
    p.add_argument("--concurrency", nargs="+", type=positive_int, default=[1, 6, 24, 48])
    p.add_argument("--input-len", type=positive_int, default=128)
    p.add_argument("--output-len", type=positive_int, default=128)
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--workload-file", default=None, help="batch-size histogram: JSON or saved /metrics text"
    )
    src.add_argument(
        "--workload-url", default=None, help="a server's /metrics: its decode batch histogram"
    )
    p.add_argument(
        "--context-len",
        type=positive_int,
        default=None,
        help="sawtooth KV tokens per request (default: input_len + output_len / 2)",
    )
    p.add_argument("--max-num-seqs", type=positive_int, default=256, help="as `vgraph serve`")
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=8192)
    p.add_argument("--max-sizes", type=positive_int, default=8, help="recommended: at most K sizes")
    p.add_argument(
        "--memory-budget-mib", type=positive_float, default=None, help="recommended: budget"
    )
    p.add_argument("--num-iters", type=positive_int, default=20, help="timed steps per batch size")
    p.add_argument("--num-warmup", type=nonneg_int, default=3)
    p.add_argument("--num-rounds", type=positive_int, default=3, help="end-to-end runs per level")
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


def start_alone(args: argparse.Namespace, cand: Candidate, top: int) -> None:
    """The candidate's own engine: start-up seconds, graphs, their memory per size and the KV
    blocks it would have bought (graph bytes / bytes per KV block); then it is freed."""
    core, seconds = sweep_timing.start_core(args, cand.compilation_config(), top, num_lanes=1)
    try:
        r = cand.result
        r.update(startup_result(core, seconds))
        comp, g, runner = core.config.compilation_config, core.runner.graph_stats, core.runner
        r["capture_sizes"] = list(comp.cudagraph_capture_sizes or ())
        r["piecewise_sizes"] = list(comp.piecewise_capture_sizes or ())
        r["graph_memory_per_size"] = {str(s): b for s, b in g.graph_memory_bytes_per_size.items()}
        kv_bytes = sum(t.numel() * t.element_size() for t in runner.kv_caches.values())
        r["kv_block_bytes"] = kv_bytes / (runner.num_blocks + 1)  # one spare block: pad writes
        r["graph_kv_blocks"] = g.graph_memory_bytes / r["kv_block_bytes"]
    finally:
        core.shutdown()


def start_each(args: argparse.Namespace, cands: list[Candidate], top: int) -> list[Candidate]:
    """Start each candidate's own engine in turn; one that fails is recorded with its error.
    -> the candidates that started."""
    started = []
    for cand in cands:
        cand.result = {"name": cand.name, "mode": cand.mode, "list": cand.list_name}
        cand.result["requested_sizes"] = None if cand.sizes is None else list(cand.sizes)
        if cand.piecewise_name is not None:
            cand.result["piecewise_list"] = cand.piecewise_name
        try:
            start_alone(args, cand, top)
            started.append(cand)
        except Exception as e:  # one broken candidate must not cost the others' numbers
            _failed([cand], e)
    return started


def start_timing(
    args: argparse.Namespace, cands: list[Candidate], started: list[Candidate], top: int
) -> dict[str, sweep_timing.TimingEngine]:
    """Per mode, the timing engine over its started candidates' lists (with room for the lanes
    of the mode's `recommended` candidates, whose sizes are among the `all` list's)."""
    engines = {}
    for mode in dict.fromkeys(c.mode for c in started):
        mine = [c for c in started if c.mode == mode]
        lists = [(c.result["capture_sizes"], c.result["piecewise_sizes"]) for c in mine]
        num_lanes = sum(c.mode == mode for c in cands)
        try:
            engines[mode] = sweep_timing.start_engine(args, mode, lists, top, num_lanes)
        except Exception as e:  # nor one broken mode the other modes' numbers
            _failed(mine, e, "timing engine: ")
    return engines


def add_lanes(
    engines: dict[str, sweep_timing.TimingEngine], cands: list[Candidate]
) -> list[sweep_timing.Lane]:
    """Each started candidate's lane on its mode's timing engine."""
    lanes = []
    for c in cands:
        if c.mode not in engines:
            c.result.setdefault("error", f"the {c.mode} timing engine did not start")
            continue
        try:
            lanes.append(sweep_timing.add_lane(engines[c.mode], c))
        except ValueError as e:  # its engine lacks one of its graphs
            _failed([c], e)
    return lanes


def _failed(cands: list[Candidate], e: Exception, what: str = "") -> None:
    traceback.print_exc()
    for c in cands:
        c.result["error"] = f"{what}{type(e).__name__}: {e}"
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


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
    started = start_each(args, fixed, top)  # start-up figures, one engine at a time
    rep.write([c.result for c in cands])
    engines = start_timing(args, cands, started, top)
    rep.timing_engines = {mode: e.result for mode, e in engines.items()}
    lanes = add_lanes(engines, started)
    pending = [c for c in cands if c.list_name == RECOMMENDED]
    if pending:
        every = tuple(range(1, top + 1))
        basis = [lane for lane in lanes if lane.cand.mode == "NONE" or lane.cand.sizes == every]
        if basis:  # the per-size latencies the optimiser uses, measured once
            sweep_timing.measure_steps(args, basis)
        rep.plan([lane.cand for lane in basis], pending)
        new = start_each(args, [c for c in pending if c.sizes is not None], top)
        lanes += add_lanes(engines, new)
    if lanes:
        sweep_timing.measure_steps(args, lanes)
        sweep_timing.release(list(engines.values()))
        sweep_timing.measure_e2e(args, lanes)
    for e in engines.values():
        e.core.shutdown()
    report = rep.finish(cands)
    failed = [c.name for c in cands if "error" in c.result]
    if failed:
        raise SystemExit(f"bench sweep: candidate(s) {', '.join(failed)} failed")
    return report


if __name__ == "__main__":
    main(add_cli_args(argparse.ArgumentParser(description=__doc__)).parse_args())

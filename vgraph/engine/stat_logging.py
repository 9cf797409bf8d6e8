"""LoggingStatLogger: vLLM's periodic stats line, one every VGRAPH_LOG_STATS_INTERVAL seconds
(10) while the engine is busy.

A StatLogger for AsyncLLM: `record()` sums the frontend's IterationStats and keeps the core's
latest SchedulerStats; `log()` (called on a timer by the server) prints one INFO line of
throughput over the interval, running and waiting requests, KV cache usage, the prefix-cache hit
rate over the interval (cached / looked-up prompt tokens) and the share of engine steps replayed
as graphs, then starts a new interval. An idle interval after an idle one prints nothing, so a
quiet server keeps a quiet log.
"""

from __future__ import annotations

import logging
import os
import time

from vgraph.cudagraph.counters import GraphStats
from vgraph.engine.async_llm import IterationStats
from vgraph.engine.protocol import SchedulerStats

logger = logging.getLogger("vgraph.stats")


def log_stats_interval() -> float:
    return float(os.environ.get("VGRAPH_LOG_STATS_INTERVAL", "10"))


def replayed_steps(g: GraphStats) -> tuple[int, int]:
    """(steps replayed as FULL or PIECEWISE graphs, all steps) so far."""
    graphed = sum(n for mode, n in g.steps.items() if mode in ("FULL", "PIECEWISE"))
    return graphed, sum(g.steps.values())


class LoggingStatLogger:
    def __init__(self) -> None:
        self.scheduler_stats = SchedulerStats()
        self.graph_stats = GraphStats()
        self.last_time = time.monotonic()
        self.last_steps = (0, 0)
        self.last_prefix = (0, 0)  # prefix_cache_queries, prefix_cache_hits (cumulative)
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.was_busy = False

    def record(self, scheduler_stats: SchedulerStats | None, iteration: IterationStats) -> None:
        if scheduler_stats is not None:
            self.scheduler_stats = scheduler_stats
            if scheduler_stats.graph_stats is not None:
                self.graph_stats = scheduler_stats.graph_stats
        self.num_prompt_tokens += iteration.num_prompt_tokens
        self.num_generation_tokens += iteration.num_generation_tokens

    def log(self) -> str | None:
        """Log (and return) the line for the interval since the last call, or None when idle."""
        now = time.monotonic()
        s = self.scheduler_stats
        busy = bool(
            self.num_prompt_tokens or self.num_generation_tokens or s.num_running or s.num_waiting
        )
        line = None
        if busy or self.was_busy:  # one line of zeros marks the end of a busy spell
            dt = max(now - self.last_time, 1e-9)
            graphed, steps = replayed_steps(self.graph_stats)
            d_graphed, d_steps = graphed - self.last_steps[0], steps - self.last_steps[1]
            self.last_steps = (graphed, steps)
            queries = s.prefix_cache_queries - self.last_prefix[0]
            hits = s.prefix_cache_hits - self.last_prefix[1]
            self.last_prefix = (s.prefix_cache_queries, s.prefix_cache_hits)
            line = (
                f"Avg prompt throughput: {self.num_prompt_tokens / dt:.1f} tokens/s, "
                f"Avg generation throughput: {self.num_generation_tokens / dt:.1f} tokens/s, "
                f"Running: {s.num_running} reqs, Waiting: {s.num_waiting} reqs, "
                f"KV cache usage: {100 * s.kv_cache_usage:.1f}%, "
                f"Prefix cache hit rate: {100 * hits / max(queries, 1):.1f}%, "
                f"Graph replay: {100 * d_graphed / max(d_steps, 1):.1f}% of {d_steps} steps"
            )
            logger.info("%s", line)
        self.was_busy = busy
        self.last_time = now
        self.num_prompt_tokens = self.num_generation_tokens = 0
        return line

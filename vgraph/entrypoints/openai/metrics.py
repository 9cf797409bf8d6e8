"""Prometheus metrics for `vgraph serve` (GET /metrics), all under the `vgraph:` prefix.

A StatLogger for AsyncLLM: frontend-side counters and histograms are updated per batch of engine
outputs; the engine core's SchedulerStats (running/waiting requests, KV cache usage and its
GraphStats) are read at scrape time by a custom collector, so a scrape always shows the latest
values. Per finished request, vLLM's histograms: queue, prefill, decode and inference time,
prompt and generation tokens; per batch of outputs, tokens (iteration_tokens_total). Each
instance has its own registry (no global state). GraphStats fields: steps ->
vgraph:cudagraph_steps_total{mode}, eager_fallbacks -> vgraph:eager_fallback_steps_total{reason},
padded_tokens -> vgraph:padded_tokens_total; num_graphs, capture_seconds and graph_memory_bytes
-> gauges of those names.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from vgraph.cudagraph.counters import GraphStats, histogram_buckets
from vgraph.engine.async_llm import IterationStats
from vgraph.engine.protocol import SchedulerStats

TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
]
ITL_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    80.0,
]
disable_created_metrics()  # no `*_created` series: they double the page and nobody reads them

E2E_BUCKETS = [
    0.1,
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
]


ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def buckets_1_2_5(limit: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to limit (vLLM's token-count buckets)."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > limit:
                return out
            out.append(m * scale)
        scale *= 10


class PrometheusStatLogger:
    def __init__(self, model_name: str, max_model_len: int = 8192) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        self.scheduler_stats: SchedulerStats | None = None
        self.graph_stats = GraphStats()
        self.engine_dead = False
        reg, labels = self.registry, ["model_name"]
        self.prompt_tokens = Counter(
            "vgraph:prompt_tokens", "Prompt tokens prefilled.", labels, registry=reg
        )
        self.generation_tokens = Counter(
            "vgraph:generation_tokens", "Tokens generated.", labels, registry=reg
        )
        self.request_success = Counter(
            "vgraph:request_success",
            "Finished requests by finish reason.",
            labels + ["finished_reason"],
            registry=reg,
        )
        self.ttft = Histogram(
            "vgraph:time_to_first_token_seconds",
            "Time to first token.",
            labels,
            buckets=TTFT_BUCKETS,
            registry=reg,
        )
        self.itl = Histogram(
            "vgraph:inter_token_latency_seconds",
            "Time between a request's successive outputs.",
            labels,
            buckets=ITL_BUCKETS,
            registry=reg,
        )
        self.e2e = Histogram(
            "vgraph:e2e_request_latency_seconds",
            "Arrival to last token.",
            labels,
            buckets=E2E_BUCKETS,
            registry=reg,
        )
        # vLLM's per-request phase histograms (seconds) and token-count histograms
        self.phases = {
            name: Histogram(
                f"vgraph:request_{name}_time_seconds",
                doc,
                labels,
                buckets=E2E_BUCKETS,
                registry=reg,
            )
            for name, doc in (
                ("queue", "Arrival to the request's first engine step."),
                ("prefill", "First engine step to first token."),
                ("decode", "First token to last token."),
                ("inference", "First engine step to last token."),
            )
        }
        token_buckets = buckets_1_2_5(max_model_len)
        self.request_prompt_tokens = Histogram(
            "vgraph:request_prompt_tokens",
            "Prompt tokens per finished request.",
            labels,
            buckets=token_buckets,
            registry=reg,
        )
        self.request_generation_tokens = Histogram(
            "vgraph:request_generation_tokens",
            "Generated tokens per finished request.",
            labels,
            buckets=token_buckets,
            registry=reg,
        )
        self.iteration_tokens = Histogram(
            "vgraph:iteration_tokens_total",
            "Prompt plus generated tokens per batch of engine outputs.",
            labels,
            buckets=ITERATION_TOKEN_BUCKETS,
            registry=reg,
        )
        reg.register(_SchedulerCollector(self))

    def record(self, scheduler_stats: SchedulerStats | None, iteration: IterationStats) -> None:
        if scheduler_stats is not None:
            self.scheduler_stats = scheduler_stats
            if scheduler_stats.graph_stats is not None:  # sent every few steps only
                self.graph_stats = scheduler_stats.graph_stats
        m = self.model_name
        self.prompt_tokens.labels(m).inc(iteration.num_prompt_tokens)
        self.generation_tokens.labels(m).inc(iteration.num_generation_tokens)
        num_tokens = iteration.num_prompt_tokens + iteration.num_generation_tokens
        if num_tokens:
            self.iteration_tokens.labels(m).observe(num_tokens)
        for hist, values in (
            (self.ttft, iteration.ttfts),
            (self.itl, iteration.itls),
            (self.e2e, iteration.e2e_latencies),
            (self.phases["queue"], iteration.queue_times),
            (self.phases["prefill"], iteration.prefill_times),
            (self.phases["decode"], iteration.decode_times),
            (self.phases["inference"], iteration.inference_times),
            (self.request_prompt_tokens, iteration.prompt_lens),
            (self.request_generation_tokens, iteration.generation_lens),
        ):
            child = hist.labels(m)
            for v in values:
                child.observe(v)
        for reason in iteration.finish_reasons:
            if reason != "abort":  # as vLLM: only requests that finished count as a success
                self.request_success.labels(m, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _SchedulerCollector(Collector):
    """The engine core's latest SchedulerStats, as gauges and counters, at scrape time."""

    def __init__(self, owner: PrometheusStatLogger) -> None:
        self.owner = owner

    def collect(self) -> Iterator[Metric]:
        s = self.owner.scheduler_stats or SchedulerStats()
        m = self.owner.model_name

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(f"vgraph:{name}", doc, labels=["model_name"])
            g.add_metric([m], value)
            return g

        yield gauge("num_requests_running", "Requests in the running batch.", s.num_running)
        yield gauge("num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting)
        yield gauge(
            "kv_cache_usage_perc", "Fraction of KV cache blocks in use (0..1).", s.kv_cache_usage
        )
        yield gauge(
            "engine_dead", "1 once the engine core has died.", float(self.owner.engine_dead)
        )
        for name, doc, value in (
            ("num_preemptions", "Preemptions (recompute).", s.num_preemptions),
            ("engine_steps", "Engine steps executed.", s.num_steps),
            (
                "prefix_cache_queries",
                "Prefix cache queries, in tokens (prompt tokens looked up).",
                s.prefix_cache_queries,
            ),
            (
                "prefix_cache_hits",
                "Prefix cache hits, in tokens (prompt tokens found cached).",
                s.prefix_cache_hits,
            ),
        ):
            c = CounterMetricFamily(f"vgraph:{name}", doc, labels=["model_name"])
            c.add_metric([m], value)
            yield c
        yield from graph_metrics(self.owner.graph_stats, m)


def graph_metrics(g: GraphStats, model_name: str) -> Iterator[Metric]:
    """SchedulerStats.graph_stats (graph-mode work) -> metric families."""
    families = (
        ("cudagraph_steps", "Engine steps per cudagraph runtime mode.", "mode", g.steps),
        (
            "eager_fallback_steps",
            "Steps run without the mode's graph for them, by reason (cascade: kept off FULL).",
            "reason",
            g.eager_fallbacks,
        ),
    )
    for name, doc, label, counts in families:
        c = CounterMetricFamily(f"vgraph:{name}", doc, labels=["model_name", label])
        for key, value in sorted(counts.items()):
            c.add_metric([model_name, key], value)
        yield c
    c = CounterMetricFamily(
        "vgraph:padded_tokens", "Pad tokens added to reach a capture size.", labels=["model_name"]
    )
    c.add_metric([model_name], g.padded_tokens)
    yield c
    for name, doc, counts in (
        ("decode_batch_size", "Requests per uniform decode step.", g.decode_batch_sizes),
        (
            "padded_decode_batch_size",
            "Size a uniform decode step ran at (its capture size when replayed).",
            g.padded_decode_batch_sizes,
        ),
    ):
        h = HistogramMetricFamily(f"vgraph:{name}", doc, labels=["model_name"])
        total = float(sum(size * n for size, n in counts.items()))
        h.add_metric([model_name], buckets=histogram_buckets(counts), sum_value=total)
        yield h
    for name, doc, value in (
        ("num_graphs", "Graphs captured at start-up.", g.num_graphs),
        ("capture_seconds", "Seconds spent capturing graphs.", g.capture_seconds),
        ("graph_memory_bytes", "Device memory the captured graphs took.", g.graph_memory_bytes),
    ):
        gauge = GaugeMetricFamily(f"vgraph:{name}", doc, labels=["model_name"])
        gauge.add_metric([model_name], value)
        yield gauge

"""The sweep's workload as a histogram of decode batch sizes (batch size -> decode steps), from
concurrency levels, a file or a running server's /metrics. It starts no engine.

From /metrics (or a saved copy of it), the `vgraph:decode_batch_size` histogram is read: the
steps counted in a bucket (its count less the previous bucket's) are attributed to the bucket's
upper edge `le`. The edges are every size to 32, then the default capture list's steps (8 to 256,
16 to 512): batches up to 32 are exact, larger ones count at the size the default list would pad
them to. Steps above the last finite edge can't be placed and are
left out with a warning. A JSON file may instead give the histogram itself: {"6": 120, "24": 80}.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

logger = logging.getLogger(__name__)

METRIC = "vgraph:decode_batch_size"


def from_concurrency(levels: list[int], output_len: int) -> dict[int, float]:
    """Each level runs its requests in lockstep: output_len - 1 decode steps of `level`
    requests after the prefill step (at least one)."""
    return {c: float(max(output_len - 1, 1)) for c in sorted(set(levels))}


def parse_metrics(text: str, metric: str = METRIC) -> dict[int, float]:
    """Prometheus text exposition -> {bucket upper edge: steps in that bucket} (every series of
    the metric summed, e.g. several model names). ValueError if the metric is absent."""
    from prometheus_client.parser import text_string_to_metric_families

    cumulative: dict[float, float] = {}
    found = False
    for family in text_string_to_metric_families(text):
        if family.name != metric:
            continue
        found = True
        for sample in family.samples:
            if sample.name == metric + "_bucket":
                le = float(sample.labels["le"])
                cumulative[le] = cumulative.get(le, 0.0) + sample.value
    if not found:
        raise ValueError(f"workload: no {metric} histogram in the metrics text")
    histogram: dict[int, float] = {}
    previous = 0.0
    for le in sorted(cumulative):
        count = cumulative[le] - previous
        previous = cumulative[le]
        if count <= 0:
            continue
        if math.isinf(le):
            logger.warning("workload: %d decode steps above the last bucket edge left out", count)
            continue
        histogram[int(le)] = count
    return histogram


def load_histogram(source: str) -> dict[int, float]:
    """A histogram from an http(s) /metrics URL (--workload-url), a saved metrics text file or
    a JSON file (--workload-file). ValueError naming the flag when it can't be read."""
    if source.startswith(("http://", "https://")):
        import httpx

        try:
            resp = httpx.get(source, timeout=10)
        except (httpx.HTTPError, httpx.InvalidURL) as e:  # nothing listening, a timeout
            raise ValueError(f"--workload-url {source}: {type(e).__name__}: {e}") from None
        if resp.status_code != 200:
            raise ValueError(f"--workload-url {source}: answered HTTP {resp.status_code}")
        return _checked(parse_metrics(resp.text), source)
    try:
        text = Path(source).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--workload-file {source}: cannot read it: {e}") from None
    if text.lstrip().startswith("{"):
        try:
            raw = json.loads(text)
            histogram = {int(b): float(n) for b, n in raw.items() if float(n) > 0}
        except (AttributeError, TypeError, ValueError):
            raise ValueError(
                f"--workload-file {source}: expected a JSON object of batch size -> steps, "
                f'e.g. {{"6": 120, "24": 80}}'
            ) from None
        if any(b < 1 for b in histogram):
            raise ValueError(f"--workload-file {source}: batch sizes must be >= 1")
        return _checked(histogram, source)
    return _checked(parse_metrics(text), source)


def _checked(histogram: dict[int, float], source: str) -> dict[int, float]:
    if not histogram:
        raise ValueError(f"workload {source}: no decode steps counted yet (send some traffic)")
    return dict(sorted(histogram.items()))

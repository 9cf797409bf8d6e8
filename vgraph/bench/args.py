"""argparse types of the benchmarks' counts and lists: a bad value is argparse's usage error
(exit 2) naming the flag, before any model loads or request is sent, not a traceback from deep
inside a run."""

from __future__ import annotations

import argparse


def _int_at_least(low: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} is not allowed; use an integer >= {low}")
    return value


def positive_int(text: str) -> int:
    """A count that must be at least 1 (lengths, iterations, prompts, batch sizes)."""
    return _int_at_least(1, text)


def nonneg_int(text: str) -> int:
    """A count that may be 0 (warm-up iterations, a seed)."""
    return _int_at_least(0, text)


def positive_float(text: str) -> float:
    """A rate or budget above 0 (inf allowed)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not allowed; use a number > 0")
    return value


def percentile_list(text: str) -> list[float]:
    """Comma-separated percentiles, each in 0..100 (`bench serve --metric-percentiles`)."""
    try:
        values = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers such as 50,90,99") from None
    if any(not 0 <= p <= 100 for p in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each percentile must be in 0..100")
    return values

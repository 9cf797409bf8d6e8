"""The capture-list optimiser against brute force, the memory model, the workload readers and the
sweep's list specs. No engine: plain numbers."""

from __future__ import annotations

import itertools
import random

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from vgraph.bench.capture_plan import MemoryModel, StepCosts, nondecreasing_fit, optimal_plan
from vgraph.bench.sweep_candidates import build_candidates, parse_list
from vgraph.bench.workload import from_concurrency, load_histogram, parse_metrics
from vgraph.cudagraph.counters import GraphStats
from vgraph.entrypoints.openai.metrics import graph_metrics


def random_costs(rng: random.Random, n_batches: int, top: int) -> StepCosts:
    """A workload of n_batches distinct sizes in 1..top; latencies that grow with size, with
    noise (so not always monotone); eager dearer per request than a graph; memory per size."""
    batches = sorted(rng.sample(range(1, top + 1), n_batches))
    weights = {b: float(rng.randint(1, 20)) for b in batches}
    graph_ms = {s: 1.0 + 0.05 * s + rng.uniform(0, 0.3) for s in range(1, top + 1)}
    eager_ms = {s: 2.0 + 0.08 * s + rng.uniform(0, 0.3) for s in range(1, top + 1)}
    per_size = {s: rng.randint(1, 10) * 2**20 for s in range(1, top + 1)}
    per_size[top] += 40 * 2**20  # the pool, paid by the largest size as in a real capture
    return StepCosts(weights, graph_ms, eager_ms, MemoryModel.from_capture(per_size))


def brute_force(costs: StepCosts, max_sizes: int | None, budget: float | None) -> float | None:
    """Least expected ms over every non-empty subset of the workload's batch sizes."""
    sizes = sorted(costs.weights)
    best = None
    for k in range(1, len(sizes) + 1):
        if max_sizes is not None and k > max_sizes:
            break
        for subset in itertools.combinations(sizes, k):
            if budget is not None and costs.memory.bytes(subset) > budget:
                continue
            ms = costs.expected_ms(subset)
            best = ms if best is None else min(best, ms)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_optimal_plan_equals_brute_force(seed):
    rng = random.Random(seed)
    costs = random_costs(rng, n_batches=rng.randint(3, 8), top=rng.randint(10, 40))
    total = costs.memory.bytes(costs.weights)
    for max_sizes, budget in (
        (1, None),
        (rng.randint(2, 4), None),
        (None, total * rng.uniform(0.2, 0.7)),
        (rng.randint(2, 3), total * rng.uniform(0.3, 0.8)),  # both limits at once
        (None, None),
    ):
        plan = optimal_plan(costs, max_sizes, budget)
        want = brute_force(costs, max_sizes, budget)
        if want is None:
            assert plan is None
            continue
        assert plan is not None
        assert plan.expected_ms == pytest.approx(want, rel=1e-12)
        assert plan.expected_ms == pytest.approx(costs.expected_ms(plan.sizes), rel=1e-12)
        assert max_sizes is None or len(plan.sizes) <= max_sizes
        assert budget is None or plan.memory_bytes <= budget
        assert plan.memory_bytes == costs.memory.bytes(plan.sizes)


def test_a_budget_below_every_size_has_no_plan():
    costs = random_costs(random.Random(0), 4, 16)
    smallest = min(costs.memory.bytes([s]) for s in costs.weights)
    assert optimal_plan(costs, None, smallest * 0.99) is None
    assert optimal_plan(costs, None, smallest) is not None


def test_the_workload_sizes_are_chosen_when_latency_grows_with_size():
    costs = StepCosts(
        weights={1: 1.0, 6: 1.0, 24: 1.0, 48: 1.0},
        graph_ms={s: 1.0 + 0.01 * s for s in range(1, 65)},
        eager_ms={s: 5.0 + 0.01 * s for s in range(1, 65)},
        memory=MemoryModel({}, 0.0),
    )
    assert optimal_plan(costs, 4).sizes == (1, 6, 24, 48)
    assert optimal_plan(costs, 8).sizes == (1, 6, 24, 48)  # more sizes buy nothing: fewest
    two = optimal_plan(costs, 2)
    # two sizes: 48 must be captured (eager costs 5 ms), then the best split of the rest
    assert two.sizes == (6, 48) and two.expected_ms == pytest.approx((1.06 * 2 + 1.48 * 2) / 4)


def test_memory_model_charges_the_pool_to_the_largest_size():
    mib = 2**20
    model = MemoryModel.from_capture({1: 1 * mib, 2: 1 * mib, 4: 1 * mib, 8: 41 * mib})
    assert model.pool_per_token * 8 == 40 * mib  # 41 MiB less the median other size
    assert model.bytes([1, 2, 4, 8]) == 44 * mib  # the capture's total, as measured
    assert model.bytes([1, 4]) == 2 * mib + 20 * mib  # the pool of a size-4 graph: half


class _Collector:
    def __init__(self, stats: GraphStats) -> None:
        self.stats = stats

    def collect(self):
        yield from graph_metrics(self.stats, "m")


def test_workload_from_metrics_text_attributes_counts_to_upper_edges():
    stats = GraphStats(decode_batch_sizes={1: 5, 3: 2, 37: 4, 600: 1})
    registry = CollectorRegistry()
    registry.register(_Collector(stats))  # the server's own exposition of GraphStats
    text = generate_latest(registry).decode()
    # 37 is counted in the bucket (32, 40]; 600 is above the last edge (512) and left out
    assert parse_metrics(text) == {1: 5.0, 3: 2.0, 40: 4.0}
    with pytest.raises(ValueError, match="no vgraph:decode_batch_size histogram"):
        parse_metrics("# TYPE x counter\nx_total 1\n")


def test_workload_from_files(tmp_path):
    good = tmp_path / "hist.json"
    good.write_text('{"24": 10, "6": 3, "2": 0}')
    assert load_histogram(str(good)) == {6: 3.0, 24: 10.0}
    bad = tmp_path / "bad.json"
    bad.write_text('{"six": 3}')
    with pytest.raises(ValueError, match="batch size -> steps"):
        load_histogram(str(bad))
    assert from_concurrency([6, 1, 6], output_len=10) == {1: 9.0, 6: 9.0}


def test_list_specs():
    default = (1, 2, 4, 8, 16)
    assert parse_list("default", "--lists", 6, default) == default
    assert parse_list("pow2", "--lists", 6, default) == (1, 2, 4, 8)  # holds the batch 6
    assert parse_list("pow2:20", "--lists", 6, default) == (1, 2, 4, 8, 16)
    assert parse_list("all", "--lists", 3, default) == (1, 2, 3)
    assert parse_list("all:5", "--lists", 3, default) == (1, 2, 3, 4, 5)
    assert parse_list("48,6,24,1,6", "--lists", 3, default) == (1, 6, 24, 48)
    for bad in ("pow3", "1,0", "all:0", "", "1,,2"):
        with pytest.raises(ValueError, match="--lists: .* is not a capture list; use"):
            parse_list(bad, "--lists", 3, default)


def test_candidates():
    default = (1, 2, 4)
    cands = build_candidates(
        ["FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "PIECEWISE"],
        ["default", "recommended"],
        ["1,2"],
        3,
        default,
        4,
    )
    names = [c.name for c in cands]
    assert names == [
        "NONE",
        "FULL_DECODE_ONLY:default",
        "FULL_DECODE_ONLY:recommended",
        "FULL_DECODE_ONLY:all:4",  # the optimiser's measurement
        "FULL_AND_PIECEWISE:default pw=1,2",
        "FULL_AND_PIECEWISE:recommended pw=1,2",
        "FULL_AND_PIECEWISE:all:4",
        "PIECEWISE:1,2",  # the piecewise lists are PIECEWISE's lists
    ]
    assert cands[4].compilation_config() == {
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "cudagraph_capture_sizes": [1, 2, 4],
        "piecewise_capture_sizes": [1, 2],
    }
    with pytest.raises(ValueError, match="cudagraph_mode"):
        build_candidates(["FAST"], ["default"], None, 3, default, 4)
    with pytest.raises(ValueError, match="FULL_DECODE_ONLY:1,2,4 and FULL_DECODE_ONLY:pow2 are"):
        build_candidates(["FULL_DECODE_ONLY"], ["1,2,4", "pow2"], None, 3, default, 4)
    with pytest.raises(ValueError, match="--lists: pow2 given more than once"):
        build_candidates(["FULL_DECODE_ONLY"], ["pow2", "pow2"], None, 3, default, 4)


def test_nondecreasing_fit_pools_dips_and_keeps_a_rising_curve():
    assert nondecreasing_fit({1: 1.0, 2: 2.0, 4: 3.0}) == {1: 1.0, 2: 2.0, 4: 3.0}
    # size 24 timed in a host hiccup: it and the sizes after it are pooled to their mean
    fit = nondecreasing_fit({8: 1.4, 16: 1.5, 24: 1.8, 32: 1.6, 48: 1.7})
    assert fit[8] == 1.4 and fit[16] == 1.5
    assert fit[24] == fit[32] == fit[48] == pytest.approx(1.7)
    values = list(fit.values())
    assert values == sorted(values)

"""The capture-list optimiser: which capture sizes minimise a workload's expected decode step time
for at most K sizes and/or a graph-memory budget. An exact dynamic programme over per-size costs
measured once; plain Python, no torch, no engine.

The cost model, all from one sweep's measurements:
- a decode batch of b requests replays the graph of the smallest chosen size s >= b and costs
  graph_ms[s] (the step measured at batch s on a candidate that captured every size, so it ran
  its own graph unpadded); above the largest chosen size it runs eagerly at eager_ms[b];
- the expected step time is the mean over the workload's decode steps (weights[b] steps of b);
- graph memory is additive per size, plus the shared pool: graphs are captured largest first
  into one memory pool, so the activations of the largest size are paid once, by it. The pool
  is estimated as linear in the largest chosen size (MemoryModel).
Sizes are chosen among the workload's own batch sizes: a size between two of them only pads
more than the next one down (with latency nondecreasing in size it can't be better).
The measured per-size graph times are first fitted to that shape (nondecreasing_fit): a host
hiccup during one size's timing must not make a larger graph look cheaper than a smaller one.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable
from dataclasses import dataclass


def nondecreasing_fit(values: dict[int, float]) -> dict[int, float]:
    """The least-squares nondecreasing fit of values ordered by key (pool adjacent violators):
    a run of sizes where time falls with size is replaced by the run's mean."""
    blocks: list[list[float]] = []  # [sum, count] of each pooled run, in key order
    for key in sorted(values):
        blocks.append([values[key], 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    fitted = [total / count for total, count in blocks for _ in range(int(count))]
    return dict(zip(sorted(values), fitted))


@dataclass(frozen=True)
class MemoryModel:
    per_size: dict[int, float]  # capture size -> bytes its graphs add beyond the pool
    pool_per_token: float  # bytes of the shared pool per token of the largest size

    def bytes(self, sizes: Iterable[int]) -> float:
        sizes = list(sizes)
        if not sizes:
            return 0.0
        return sum(self.per_size.get(s, 0.0) for s in sizes) + self.pool_per_token * max(sizes)

    @staticmethod
    def from_capture(bytes_per_size: dict[int, int]) -> MemoryModel:
        """From GraphStats.graph_memory_bytes_per_size of a largest-first capture: the largest
        size's bytes beyond the median of the others are the pool."""
        if not bytes_per_size:
            return MemoryModel({}, 0.0)
        largest = max(bytes_per_size)
        others = [v for s, v in bytes_per_size.items() if s != largest]
        pool = max(bytes_per_size[largest] - (statistics.median(others) if others else 0), 0)
        per_size = {s: float(v) for s, v in bytes_per_size.items()}
        per_size[largest] -= pool
        return MemoryModel(per_size, pool / largest)


@dataclass(frozen=True)
class StepCosts:
    weights: dict[int, float]  # decode batch size -> number of steps (any scale)
    graph_ms: dict[int, float]  # capture size -> step ms of its own graph at that batch
    eager_ms: dict[int, float]  # batch size -> eager step ms
    memory: MemoryModel

    def step_ms(self, sizes: list[int], batch: int) -> float:
        """One step of `batch` requests under the sorted capture list `sizes`."""
        i = bisect.bisect_left(sizes, batch)
        return self.graph_ms[sizes[i]] if i < len(sizes) else self.eager_ms[batch]

    def expected_ms(self, sizes: Iterable[int]) -> float:
        """Mean step ms over the workload's decode steps under a capture list."""
        ordered = sorted(set(sizes))
        total = sum(self.weights.values())
        return sum(w * self.step_ms(ordered, b) for b, w in self.weights.items()) / total


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    expected_ms: float
    memory_bytes: float  # by the MemoryModel


@dataclass(frozen=True)
class _Label:
    """A chosen prefix of the list ending at one size: its count, memory and summed cost."""

    count: int
    mem: float
    cost: float  # weighted step ms of every batch <= the prefix's largest size
    prev: _Label | None
    size: int


def optimal_plan(
    costs: StepCosts, max_sizes: int | None = None, memory_budget: float | None = None
) -> Plan | None:
    """The capture list (at least one size) of least expected step time with at most max_sizes
    sizes and at most memory_budget bytes (either may be None: no limit); None if no list fits.

    DP over the candidate sizes u_0 < ... < u_{n-1}: a label at i is a list whose largest size
    is u_i; extending it by u_j (j > i) adds the batches in (u_i, u_j] at graph_ms[u_j]. Labels
    at each i are kept on their Pareto front of (count, memory, cost); the answer adds the
    eager cost of the batches above the last size. Exact for the model in the module docstring.
    """
    sizes = sorted(b for b, w in costs.weights.items() if w > 0 and b in costs.graph_ms)
    batches = sorted(costs.weights)
    cum, acc = [], 0.0  # cum[k]: weight of batches <= batches[k]
    for b in batches:
        acc += costs.weights[b]
        cum.append(acc)

    def weight_upto(x: int) -> float:
        k = bisect.bisect_right(batches, x)
        return cum[k - 1] if k else 0.0

    tail = [  # eager cost of the batches above u_i
        sum(costs.weights[b] * costs.eager_ms[b] for b in batches if b > u) for u in sizes
    ]
    pool = costs.memory.pool_per_token
    labels: list[list[_Label]] = []
    for j, u in enumerate(sizes):
        g, w_u, m_u = costs.graph_ms[u], weight_upto(u), costs.memory.per_size.get(u, 0.0)
        cands = [_Label(1, m_u, w_u * g, None, u)]
        for i in range(j):
            seg = (w_u - weight_upto(sizes[i])) * g
            cands += [_Label(a.count + 1, a.mem + m_u, a.cost + seg, a, u) for a in labels[i]]
        cands = [
            c
            for c in cands
            if (max_sizes is None or c.count <= max_sizes)
            and (memory_budget is None or c.mem + pool * u <= memory_budget)
        ]
        labels.append(_pareto(cands, max_sizes is not None, memory_budget is not None))
    best: tuple[float, int, float, _Label] | None = None
    for j, front in enumerate(labels):
        for a in front:
            key = (a.cost + tail[j], a.count, a.mem)
            if best is None or key < best[:3]:
                best = (*key, a)
    if best is None:
        return None
    chosen, a = [], best[3]
    while a is not None:
        chosen.append(a.size)
        a = a.prev
    total = sum(costs.weights.values())
    plan_sizes = tuple(sorted(chosen))
    return Plan(plan_sizes, best[0] / total, costs.memory.bytes(plan_sizes))


def _pareto(labels: list[_Label], by_count: bool, by_mem: bool) -> list[_Label]:
    """Labels no other label beats or equals on every kept dimension (count, memory, cost)."""

    def key(a: _Label) -> tuple[float, float, float]:
        return (a.count if by_count else 0, a.mem if by_mem else 0.0, a.cost)

    kept: list[_Label] = []
    for a in sorted(labels, key=key):
        ka = key(a)
        if not any(all(x <= y for x, y in zip(key(k), ka)) for k in kept):
            kept.append(a)
    return kept

"""The cascade cost rule and the shared prefix of a decode step, from its block tables."""

from __future__ import annotations

from vgraph.attention.cascade import (
    MIN_NUM_REQS,
    MIN_PREFIX_TOKENS,
    CascadeCostRule,
    num_common_prefix_blocks,
)


def test_common_prefix_is_leading_blocks_all_share_and_all_computed() -> None:
    tables = [[7, 8, 9, 1], [7, 8, 9, 2, 5], [7, 8, 4]]
    assert num_common_prefix_blocks(tables, [60, 70, 40], 16) == 2
    assert num_common_prefix_blocks(tables[:2], [60, 70], 16) == 3
    # a request that has computed only 20 tokens caps the prefix at its one full block
    assert num_common_prefix_blocks(tables[:2], [20, 70], 16) == 1
    assert num_common_prefix_blocks([[1, 2], [3, 2]], [40, 40], 16) == 0
    assert num_common_prefix_blocks([], [], 16) == 0


def test_cost_rule_thresholds() -> None:
    rule = CascadeCostRule()
    assert rule.use(MIN_PREFIX_TOKENS, MIN_NUM_REQS)
    assert not rule.use(MIN_PREFIX_TOKENS - 16, 64)
    assert not rule.use(4096, MIN_NUM_REQS - 1)
    assert CascadeCostRule(min_prefix_tokens=16, min_num_reqs=2).use(16, 2)


def test_prefix_blocks_of_a_step() -> None:
    rule = CascadeCostRule(min_prefix_tokens=32, min_num_reqs=3)
    tables = [[7, 8, 9, 1], [7, 8, 9, 2], [7, 8, 9, 3]]
    assert rule.prefix_blocks(tables, [60, 60, 60], 16) == 3
    assert rule.prefix_blocks(tables[:2], [60, 60], 16) == 0  # too few requests
    assert rule.prefix_blocks(tables, [60, 60, 20], 16) == 0  # 1 block: too short a prefix

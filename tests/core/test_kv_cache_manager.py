"""KVCacheManager: block bookkeeping only (no tensors, no model)."""

from __future__ import annotations

import pytest

from vgraph.core.kv_cache_manager import KVCacheManager
from vgraph.request import Request
from vgraph.sampling_params import SamplingParams


def make_req(rid: str, num_prompt: int = 1) -> Request:
    return Request(rid, list(range(num_prompt)), SamplingParams(), frozenset())


@pytest.mark.parametrize(
    "num_tokens, blocks", [(1, 1), (15, 1), (16, 1), (17, 2), (48, 3), (49, 4)]
)
def test_blocks_needed_rounds_up(num_tokens: int, blocks: int) -> None:
    assert KVCacheManager(8, 16).blocks_needed(num_tokens) == blocks


def test_allocate_grows_by_whole_blocks_and_never_moves_them() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=16)
    req = make_req("a", 40)
    new = kv.allocate_slots(req, 20)  # 20 tokens -> 2 blocks
    assert new is not None and len(new) == 2
    assert kv.get_block_ids("a") == new and kv.num_free_blocks == 6
    req.num_computed_tokens = 20
    assert kv.allocate_slots(req, 12) == []  # 32 tokens still fit in 2 blocks
    req.num_computed_tokens = 32
    more = kv.allocate_slots(req, 1)  # the 33rd token opens a third block
    assert more is not None and len(more) == 1
    assert kv.get_block_ids("a") == new + more  # appended, the first two untouched
    assert kv.num_free_blocks == 5


def test_requests_never_share_blocks() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=16)
    a, b = make_req("a"), make_req("b")
    kv.allocate_slots(a, 40)
    kv.allocate_slots(b, 40)
    assert not set(kv.get_block_ids("a")) & set(kv.get_block_ids("b"))
    assert len(kv.get_block_ids("a")) == len(kv.get_block_ids("b")) == 3


def test_allocation_that_does_not_fit_changes_nothing() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=16)
    a, b = make_req("a"), make_req("b")
    assert kv.allocate_slots(a, 48) is not None  # 3 of 4 blocks
    assert kv.allocate_slots(b, 17) is None  # needs 2, 1 free
    assert kv.num_free_blocks == 1
    assert kv.get_block_ids("b") == []
    assert kv.get_block_ids("a") and len(kv.get_block_ids("a")) == 3
    assert kv.allocate_slots(b, 16) is not None  # exactly one block still fits
    assert kv.num_free_blocks == 0


def test_free_returns_every_block_and_usage_follows() -> None:
    kv = KVCacheManager(num_blocks=10, block_size=16)
    a, b = make_req("a"), make_req("b")
    kv.allocate_slots(a, 64)  # 4 blocks
    kv.allocate_slots(b, 16)  # 1 block
    assert kv.usage == pytest.approx(0.5)
    held = set(kv.get_block_ids("a"))
    kv.free(a)
    assert kv.get_block_ids("a") == []
    assert kv.num_free_blocks == 9 and kv.usage == pytest.approx(0.1)
    assert held <= set(kv.free_blocks)
    kv.free(a)  # freeing twice is harmless
    kv.free(b)
    assert kv.num_free_blocks == 10 and kv.usage == 0.0
    assert sorted(kv.free_blocks) == list(range(10))  # no block lost or duplicated


def test_block_size_32() -> None:
    kv = KVCacheManager(num_blocks=2, block_size=32)
    req = make_req("a")
    assert kv.allocate_slots(req, 64) is not None and kv.num_free_blocks == 0
    assert kv.allocate_slots(make_req("b"), 1) is None

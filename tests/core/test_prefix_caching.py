"""Automatic prefix caching: chained sha256 block hashes, hits as whole blocks, LRU eviction,
reference counts, and the free-block count returning to the total whatever happens."""

from __future__ import annotations

import hashlib
import random
import struct

import pytest

from vgraph.config import SchedulerConfig
from vgraph.core.kv_cache_manager import KVCacheManager
from vgraph.core.kv_cache_utils import extend_block_hashes, hash_block_tokens, root_hash
from vgraph.core.scheduler import Scheduler
from vgraph.request import Request, RequestStatus
from vgraph.sampling_params import SamplingParams

BS = 16
ROOT = root_hash(("model", "float32"))


def make_req(
    rid: str, tokens: list[int], max_tokens: int = 4, cache_salt: str | None = None
) -> Request:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return Request(rid, list(tokens), params, frozenset(), cache_salt=cache_salt)


def make_sched(num_blocks: int = 64, budget: int = 8192, max_num_seqs: int = 256) -> Scheduler:
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, max_model_len=num_blocks * BS
    )
    kv = KVCacheManager(num_blocks, BS, enable_caching=True, extra_keys=("model", "float32"))
    return Scheduler(config, kv)


def run_to_end(s: Scheduler, token: int = 7) -> None:
    while s.has_unfinished_requests():
        out = s.schedule()
        s.update_from_output(out, [token] * len(out.requests))


def hashes(tokens: list[int], root: bytes = ROOT) -> list[bytes]:
    out: list[bytes] = []
    extend_block_hashes(out, tokens, BS, root)
    return out


# ---- hashes --------------------------------------------------------------------------------


def test_hash_is_sha256_chained_over_parent_and_tokens() -> None:
    a = hashes(list(range(48)))
    assert len(a) == 3 and all(len(h) == 32 for h in a)  # full blocks only, 32-byte digests
    assert hashes(list(range(48)) + [1, 2, 3]) == a  # a partial block is not hashed
    assert a[1] == hash_block_tokens(a[0], list(range(16, 32)))  # chained on the parent
    # the same block of tokens after a different prefix is a different block
    b = hashes([99] + list(range(1, 48)))
    assert b[0] != a[0] and b[1] != a[1] and b[2] != a[2]
    # extra keys (model, dtype) change every hash
    assert hashes(list(range(48)), root_hash(("model", "bfloat16")))[0] != a[0]


def test_no_collisions_between_different_token_sequences() -> None:
    rng = random.Random(0)
    seen: dict[bytes, tuple[int, ...]] = {}
    blocks = {tuple(rng.randrange(1 << 17) for _ in range(BS)) for _ in range(3000)}
    # encodings a careless serialisation would confuse: large ids, negatives, byte patterns
    blocks |= {(256,) + (0,) * 15, (1, 0) + (0,) * 14, (-1,) * 16, (255,) * 16, (2**40,) * 16}
    for block in blocks:
        h = hash_block_tokens(ROOT, block)
        assert seen.setdefault(h, block) == block
    assert len(seen) == len(blocks)
    # a shorter block never equals a longer one padded with zeros
    assert hash_block_tokens(ROOT, [0] * 15) != hash_block_tokens(ROOT, [0] * 16)


def test_hashes_are_stable_across_processes() -> None:
    """sha256, not Python's salted hash(): fixed bytes for a fixed input."""
    expect = hashlib.sha256(b"p" + struct.pack("<Q3q", 3, 1, 2, 3)).digest()
    assert hash_block_tokens(b"p", [1, 2, 3]) == expect


def test_cache_salt_roots_the_chain_and_only_the_same_salt_shares() -> None:
    """vLLM's cache_salt: in the first block's hash only; the chain carries it on."""
    keys = ("model", "float32")
    salted = {s: hashes(list(range(48)), root_hash(keys, s)) for s in ("tenantA", "tenantB")}
    assert root_hash(keys, None) == ROOT  # no salt: the hashes of today
    assert salted["tenantA"] == hashes(list(range(48)), root_hash(keys, "tenantA"))
    for h in salted.values():
        assert not set(h) & set(hashes(list(range(48))))  # every block differs, not the first
    assert not set(salted["tenantA"]) & set(salted["tenantB"])
    # the salt is its own field: it never reads as one more extra key
    assert root_hash(keys, "x") != root_hash((*keys, "x")) and root_hash(keys, "") != ROOT


def test_requests_share_blocks_only_with_the_same_cache_salt() -> None:
    s = make_sched()
    prompt = list(range(100))  # 6 full blocks + 4: a hit covers at most 96 tokens

    def cached(rid: str, salt: str | None) -> int:
        r = make_req(rid, prompt, cache_salt=salt)
        s.add_request(r)
        run_to_end(s)
        return r.num_cached_tokens

    assert cached("a1", "tenantA") == 0
    assert cached("a2", "tenantA") == 96  # same salt: shared
    assert cached("b1", "tenantB") == 0  # another salt: nothing shared
    assert cached("n1", None) == 0  # no salt shares nothing with a salted request
    assert cached("n2", None) == 96  # and no salt shares with no salt, as before
    assert cached("b2", "tenantB") == 96
    assert s.kv.num_free_blocks == s.kv.num_blocks


# ---- hits and accounting -------------------------------------------------------------------


def test_second_request_hits_whole_blocks_and_computes_its_last_token() -> None:
    s = make_sched()
    prompt = list(range(100, 140))  # 40 tokens: 2 full blocks + 8
    s.add_request(make_req("a", prompt))
    run_to_end(s)
    assert s.kv.prefix_cache_hits == 0 and s.kv.prefix_cache_queries == 40
    b = make_req("b", prompt)
    s.add_request(b)
    out = s.schedule()
    assert b.num_cached_tokens == 32 and out.num_scheduled_tokens == [8]
    assert s.kv.prefix_cache_hits == 32 and s.kv.prefix_cache_queries == 80
    s.update_from_output(out, [7])
    run_to_end(s)
    # a prompt of exactly two blocks: its last token is always computed, so one block hits
    c = make_req("c", prompt[:32])
    s.add_request(c)
    out = s.schedule()
    assert c.num_cached_tokens == 16 and out.num_scheduled_tokens == [16]
    run_to_end(s)
    assert s.kv.num_free_blocks == s.kv.num_blocks


def test_miss_after_a_different_token_and_no_caching_when_disabled() -> None:
    s = make_sched()
    s.add_request(make_req("a", list(range(48))))
    run_to_end(s)
    other = list(range(48))
    other[20] = 999  # differs in the second block: only the first block hits
    b = make_req("b", other)
    s.add_request(b)
    s.schedule()
    assert b.num_cached_tokens == 16
    off = Scheduler(SchedulerConfig(max_model_len=1024), KVCacheManager(64, BS))
    for rid in ("x", "y"):
        r = make_req(rid, list(range(48)))
        off.add_request(r)
        run_to_end(off)
        assert r.num_cached_tokens == 0
    assert off.kv.prefix_cache_queries == off.kv.prefix_cache_hits == 0


def test_running_requests_share_blocks_by_reference_count() -> None:
    s = make_sched()
    prompt = list(range(50))
    a, b = make_req("a", prompt, 8), make_req("b", prompt, 8)
    s.add_request(a)
    s.add_request(b)
    out = s.schedule()  # a registers its blocks at allocation; b, admitted next, hits them
    shared = s.kv.get_block_ids("a")[:3]
    assert s.kv.get_block_ids("b")[:3] == shared
    assert out.same_step_kv  # b attends to KV that a writes in this very step
    assert all(s.kv.ref_cnt[blk] == 2 for blk in shared)
    s.abort_requests(["a"])
    assert all(s.kv.ref_cnt[blk] == 1 for blk in shared)  # still held by b
    assert not set(shared) & set(s.kv.free_blocks)
    s.abort_requests(["b"])
    assert s.kv.num_free_blocks == s.kv.num_blocks


def test_lru_eviction_order_and_lazy_eviction() -> None:
    kv = KVCacheManager(4, BS, enable_caching=True)
    a = make_req("a", list(range(32)))
    kv.allocate_slots(a, 32)
    a_blocks = list(kv.get_block_ids("a"))
    a.status = RequestStatus.FINISHED_STOPPED
    kv.free(a)
    b = make_req("b", list(range(500, 532)))
    kv.allocate_slots(b, 32)
    b.status = RequestStatus.FINISHED_STOPPED
    kv.free(b)
    # freed blocks keep their contents: a lookup of a's prompt still hits both
    probe = make_req("probe", list(range(32)) + [1])
    assert kv.get_computed_blocks(probe) == (a_blocks, 32)
    # LRU: a's blocks (freed first) go first, its last block before its first
    c = make_req("c", [9] * 16)
    assert kv.allocate_slots(c, 16) == [a_blocks[1]]
    assert kv.get_computed_blocks(probe) == (a_blocks[:1], 16)  # evicted only now
    # touching a cached free block takes it out of the queue: it is no longer evicted next
    d = make_req("d", list(range(16)) + [5])
    hit, n = kv.get_computed_blocks(d)
    assert hit == a_blocks[:1] and n == 16
    new = kv.allocate_slots(d, 1, hit)
    assert new is not None and a_blocks[0] not in new and len(new) == 1
    assert kv.num_free_blocks == 1


def test_allocation_counts_free_hit_blocks_as_taken() -> None:
    kv = KVCacheManager(3, BS, enable_caching=True)
    a = make_req("a", list(range(32)))
    kv.allocate_slots(a, 32)
    a.status = RequestStatus.FINISHED_STOPPED
    kv.free(a)
    # 2 hit blocks (free, cached) + 2 new blocks > 3 blocks: refused, and nothing changes
    b = make_req("b", list(range(64)) + [1])
    hit, _ = kv.get_computed_blocks(b)
    assert len(hit) == 2 and kv.allocate_slots(b, 33, hit) is None
    assert kv.num_free_blocks == 3 and kv.get_block_ids("b") == []
    assert kv.allocate_slots(b, 16, hit) is not None and kv.num_free_blocks == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_preemption_abort_finish_and_chunks_return_every_block(seed: int) -> None:
    """Random requests sharing prefixes through a small pool (preemptions) with a small budget
    (chunked prefill) and random aborts: every block comes back, every count returns to 0."""
    rng = random.Random(seed)
    s = make_sched(num_blocks=24, budget=40, max_num_seqs=6)
    system = [rng.randrange(1000) for _ in range(40)]
    n_added = 0
    for _ in range(400):
        if n_added < 30 and rng.random() < 0.7:
            tail = [rng.randrange(1000) for _ in range(rng.randrange(1, 40))]
            prompt = (system[: rng.choice([0, 16, 33, 40])] + tail)[:120]
            s.add_request(make_req(f"r{n_added}", prompt, rng.randrange(10, 80)))
            n_added += 1
        if s.requests and rng.random() < 0.05:
            s.abort_requests([rng.choice(sorted(s.requests))])
        out = s.schedule()
        s.update_from_output(out, [rng.randrange(1000) for _ in out.requests])
        # every block is either free (maybe cached) or held, and counted once per holder
        held = [b for r in s.running for b in s.kv.get_block_ids(r.request_id)]
        assert s.kv.num_free_blocks + len(set(held)) == s.kv.num_blocks
        assert all(s.kv.ref_cnt[b] == held.count(b) for b in set(held))
        if n_added == 30 and not s.has_unfinished_requests():
            break
    run_to_end(s)
    assert s.num_preemptions > 0 and s.kv.prefix_cache_hits > 0
    assert s.kv.num_free_blocks == s.kv.num_blocks
    assert all(c == 0 for c in s.kv.ref_cnt) and not s.kv.req_to_blocks
    assert not s.kv.req_block_hashes  # per-request state is dropped once requests end


def test_same_step_kv_marks_only_steps_that_read_kv_they_write() -> None:
    """A hit on a block registered by the step being scheduled is flagged (its KV is written by
    that step); hits on blocks of earlier steps are not, and such a decode step stays uniform."""
    s = make_sched()
    prompt = list(range(300, 340))  # 2 full blocks + 8
    s.add_request(make_req("a", prompt))
    out = s.schedule()
    assert not out.same_step_kv  # nothing cached yet: no hit at all
    s.update_from_output(out, [7])
    s.add_request(make_req("b", prompt))  # hits a's blocks, computed by the previous step
    out = s.schedule()
    assert out.num_scheduled_tokens == [1, 8] and not out.same_step_kv
    s.update_from_output(out, [7, 7])
    out = s.schedule()  # both decode
    assert out.is_uniform_decode and not out.same_step_kv
    # a decode step in which a new request's one-token chunk hits a block a completes now
    s2 = make_sched()
    a = make_req("a", list(range(31)), max_tokens=8)  # 31 tokens: its next token fills block 2
    s2.add_request(a)
    s2.update_from_output(s2.schedule(), [500])
    s2.add_request(make_req("c", [*range(31), 500, 9]))  # a's 32 tokens + one
    out = s2.schedule()
    assert out.num_scheduled_tokens == [1, 1]
    assert out.same_step_kv and not out.is_uniform_decode

"""KV cache manager: the block pool, which blocks each request holds, and the prefix cache.

Owns block bookkeeping only; the cache tensors live in the model runner. A request holds
ceil(num_computed_tokens_after_step / block_size) blocks; blocks are appended, never moved.

Automatic prefix caching (as vLLM V1's), when enabled:
  1. every full block of a request's tokens gets a chained sha256 hash (kv_cache_utils.py),
     rooted in the extra keys and the request's cache_salt (so different salts share nothing);
     once the tokens of a full block are scheduled, the block is registered under its hash
     (a request admitted later in the same step may hit it: its KV is then written by that
     step itself, which registered_this_step tells the scheduler);
  2. a new (or preempted) request looks its hashes up in order and takes the longest run of
     cached blocks as already computed: hits are whole blocks, and at least its last token is
     always computed (the step needs its logits);
  3. blocks are shared by reference count; a block whose count drops to 0 goes to the free
     queue but keeps its contents and hash, so a later request can still hit it;
  4. the free queue is LRU: allocation takes its head and evicts the hash of a cached block
     only then (lazily). A request's blocks are freed tail first, so its last blocks, the
     least likely to be shared, are evicted before its first ones.
The number of free blocks (cached or not) returns to num_blocks once every request is gone.
"""

from __future__ import annotations

from collections import OrderedDict

from vgraph.core.kv_cache_utils import BlockHash, extend_block_hashes, root_hash
from vgraph.request import Request
from vgraph.utils import cdiv


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_caching: bool = False,
        extra_keys: tuple[str, ...] = (),
    ) -> None:
        """extra_keys: what besides the tokens changes a block's KV (model, dtype)."""
        assert num_blocks >= 1 and block_size >= 1
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.extra_keys = extra_keys
        self.root_hash = root_hash(extra_keys)  # of requests without a cache_salt
        # LRU order, head first; keys only (an ordered set with O(1) removal from the middle)
        self.free_blocks: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[BlockHash | None] = [None] * num_blocks
        self.cached_blocks: dict[BlockHash, int] = {}  # hash -> block id
        self.req_to_blocks: dict[str, list[int]] = {}
        self.req_block_hashes: dict[str, list[BlockHash]] = {}
        self.req_num_cached: dict[str, int] = {}  # leading blocks registered in the cache
        self.prefix_cache_queries = 0  # prompt tokens looked up (admitted requests), in tokens
        self.prefix_cache_hits = 0  # of which found cached, in tokens
        self._registered_this_step: set[int] = set()  # blocks registered since begin_step

    def begin_step(self) -> None:
        """A new step is being scheduled: blocks registered so far hold KV already computed."""
        self._registered_this_step.clear()

    def registered_this_step(self, blocks: list[int]) -> bool:
        """Whether any of blocks was registered by the step being scheduled: its KV is written
        by that same step's forward, not by an earlier one."""
        return not self._registered_this_step.isdisjoint(blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests, in [0, 1] (free cached blocks count as free)."""
        return 1.0 - len(self.free_blocks) / self.num_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.block_size)

    # ---- prefix cache lookup ------------------------------------------------------------------
    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """The longest run of cached blocks that starts the request's tokens, and the tokens
        they hold. Changes nothing; pass the blocks to allocate_slots to take them."""
        if not self.enable_caching or request.num_computed_tokens > 0:
            return [], 0
        if request.sampling_params.prompt_logprobs is not None:
            return [], 0  # every prompt token is scored, so every one is computed (as vLLM)
        hashes = self._block_hashes(request)
        # the last token is always computed: a hit may cover at most num_tokens - 1 tokens
        max_blocks = (request.num_tokens - 1) // self.block_size
        blocks = []
        for h in hashes[:max_blocks]:
            block_id = self.cached_blocks.get(h)
            if block_id is None:
                break
            blocks.append(block_id)
        return blocks, len(blocks) * self.block_size

    def _block_hashes(self, request: Request) -> list[BlockHash]:
        hashes = self.req_block_hashes.setdefault(request.request_id, [])
        extend_block_hashes(hashes, request.all_token_ids, self.block_size, self._root(request))
        return hashes

    def _root(self, request: Request) -> BlockHash:
        """The parent of the request's first block: a salted request's own root."""
        if request.cache_salt is None:
            return self.root_hash
        return root_hash(self.extra_keys, request.cache_salt)

    # ---- allocation ---------------------------------------------------------------------------
    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        computed_blocks: list[int] | None = None,
    ) -> list[int] | None:
        """Grow the request's blocks to hold num_computed + len(computed_blocks) * block_size +
        num_new tokens, taking the computed (cache hit) blocks first.

        Returns the newly allocated block ids, or None (and changes nothing) if the pool is
        short. With hits, the caller advances num_computed_tokens past them.
        """
        computed_blocks = computed_blocks or []
        blocks = self.req_to_blocks.setdefault(request.request_id, [])
        num_total = (
            request.num_computed_tokens + len(computed_blocks) * self.block_size + num_new_tokens
        )
        needed = max(self.blocks_needed(num_total) - len(blocks) - len(computed_blocks), 0)
        # hit blocks that sit in the free queue stop being allocatable once taken
        num_free_hits = sum(1 for b in computed_blocks if self.ref_cnt[b] == 0)
        if needed > len(self.free_blocks) - num_free_hits:
            if not blocks:
                del self.req_to_blocks[request.request_id]
            return None
        for b in computed_blocks:
            if self.ref_cnt[b] == 0:
                del self.free_blocks[b]
            self.ref_cnt[b] += 1
        blocks.extend(computed_blocks)
        new = [self._pop_free_block() for _ in range(needed)]
        blocks.extend(new)
        if self.enable_caching:
            self._cache_full_blocks(request, blocks, num_total)
        return new

    def record_lookup(self, request: Request, num_hit_tokens: int) -> None:
        """Count an admitted request's lookup: its tokens queried, num_hit_tokens found."""
        if self.enable_caching:
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += num_hit_tokens

    def _pop_free_block(self) -> int:
        block_id, _ = self.free_blocks.popitem(last=False)
        h = self.block_hash[block_id]
        if h is not None:  # lazy eviction: the block leaves the cache only now
            if self.cached_blocks.get(h) == block_id:
                del self.cached_blocks[h]
            self.block_hash[block_id] = None
        self.ref_cnt[block_id] = 1
        return block_id

    def _cache_full_blocks(self, request: Request, blocks: list[int], num_tokens: int) -> None:
        """Register the request's full blocks among its first num_tokens (scheduled) tokens."""
        rid = request.request_id
        hashes = self.req_block_hashes.setdefault(rid, [])
        extend_block_hashes(
            hashes, request.all_token_ids, self.block_size, self._root(request), num_tokens
        )
        num_full = min(num_tokens // self.block_size, len(hashes))
        for i in range(self.req_num_cached.get(rid, 0), num_full):
            block_id, h = blocks[i], hashes[i]
            if self.block_hash[block_id] is None:
                self.block_hash[block_id] = h
                self._registered_this_step.add(block_id)
                # an equal block computed by another request already cached keeps its place
                self.cached_blocks.setdefault(h, block_id)
        self.req_num_cached[rid] = max(num_full, self.req_num_cached.get(rid, 0))

    def get_block_ids(self, request_id: str) -> list[int]:
        return self.req_to_blocks.get(request_id, [])

    def free(self, request: Request) -> None:
        """Drop the request's references; blocks no one holds go to the free queue's tail,
        the request's last block first (evicted before its first ones)."""
        rid = request.request_id
        blocks = self.req_to_blocks.pop(rid, [])
        self.req_num_cached.pop(rid, None)
        if request.status.finished:
            self.req_block_hashes.pop(rid, None)
        for b in reversed(blocks):
            self.ref_cnt[b] -= 1
            assert self.ref_cnt[b] >= 0, (b, request)
            if self.ref_cnt[b] == 0:
                self.free_blocks[b] = None

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash (only possible while no block is held)."""
        if len(self.free_blocks) != self.num_blocks:
            return False
        self.cached_blocks.clear()
        self.block_hash = [None] * self.num_blocks
        return True

"""KV cache manager: the block pool and which blocks each request holds. No prefix caching yet.

Owns block bookkeeping only; the cache tensors live in the model runner. A request holds
ceil(num_computed_tokens_after_step / block_size) blocks; blocks are appended, never moved.
"""

from __future__ import annotations

from collections import deque

from vgraph.request import Request
from vgraph.utils import cdiv


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        assert num_blocks >= 1 and block_size >= 1
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_blocks: deque[int] = deque(range(num_blocks))
        self.req_to_blocks: dict[str, list[int]] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests, in [0, 1]."""
        return 1.0 - len(self.free_blocks) / self.num_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.block_size)

    def allocate_slots(self, request: Request, num_new_tokens: int) -> list[int] | None:
        """Grow the request's blocks to hold num_computed + num_new tokens.

        Returns the newly added block ids, or None (and changes nothing) if the pool is short.
        """
        blocks = self.req_to_blocks.setdefault(request.request_id, [])
        needed = self.blocks_needed(request.num_computed_tokens + num_new_tokens) - len(blocks)
        if needed > len(self.free_blocks):
            return None
        new = [self.free_blocks.popleft() for _ in range(max(needed, 0))]
        blocks.extend(new)
        return new

    def get_block_ids(self, request_id: str) -> list[int]:
        return self.req_to_blocks.get(request_id, [])

    def free(self, request: Request) -> None:
        """Return the request's blocks to the pool (most recently used last)."""
        blocks = self.req_to_blocks.pop(request.request_id, [])
        self.free_blocks.extend(reversed(blocks))

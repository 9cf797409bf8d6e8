"""Block hashes for automatic prefix caching: a chained sha256 over each full block of tokens.

A block's hash covers its parent's hash (so a block is only ever found after the same prefix),
its token ids and the extra keys that change the KV (model, dtype), each field length-prefixed
and every token a fixed-width integer, so two different token sequences hash different inputs.
A request's cache_salt (vLLM's multi-tenant control) enters the root, the parent of its first
block, as vLLM puts it in the first block's extra keys only: the chain carries it to every later
block, so requests with different salts (or one with and one without) share no block.
sha256, never Python's `hash()`: a crafted prompt must not collide with another user's cached
prefix and read or poison it (vLLM's advisory CVE-2025-25183). No I/O, no tensors.
"""

from __future__ import annotations

import hashlib
import struct

BlockHash = bytes  # 32-byte sha256 digest


def root_hash(extra_keys: tuple[str, ...], cache_salt: str | None = None) -> BlockHash:
    """The parent hash of a sequence's first block: the extra keys, then the request's
    cache_salt, if any, behind a tag of its own (so a salt never reads as one more key)."""
    h = hashlib.sha256(b"vgraph-prefix-cache-v1")
    for key in extra_keys:
        data = key.encode()
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    if cache_salt is not None:
        data = cache_salt.encode()
        h.update(b"\x00cache_salt" + struct.pack("<Q", len(data)))
        h.update(data)
    return h.digest()


def hash_block_tokens(parent: BlockHash, token_ids: list[int] | tuple[int, ...]) -> BlockHash:
    """sha256(parent | number of tokens | tokens as little-endian int64)."""
    h = hashlib.sha256(parent)
    h.update(struct.pack(f"<Q{len(token_ids)}q", len(token_ids), *token_ids))
    return h.digest()


def extend_block_hashes(
    hashes: list[BlockHash],
    token_ids: list[int],
    block_size: int,
    root: BlockHash,
    num_tokens: int | None = None,
) -> None:
    """Append the hashes of the full blocks among the first num_tokens (default: all) token ids
    that `hashes` does not cover yet; each block chains on the one before it."""
    num_tokens = len(token_ids) if num_tokens is None else num_tokens
    parent = hashes[-1] if hashes else root
    for start in range(len(hashes) * block_size, num_tokens - block_size + 1, block_size):
        parent = hash_block_tokens(parent, token_ids[start : start + block_size])
        hashes.append(parent)

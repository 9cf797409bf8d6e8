"""Each rank's shards, built in this process as rank r of 2 (no group needed to load weights): the
safetensors loader fills them with the rank's rows and columns of the checkpoint, and dummy
weights are the same numbers at tp=1 and tp=2."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from safetensors import safe_open

from vgraph.distributed import parallel_state
from vgraph.distributed.parallel_state import TPGroup
from vgraph.engine.arg_utils import create_engine_config
from vgraph.models.loader import load_model


@contextmanager
def as_rank(rank: int, world_size: int) -> Iterator[None]:
    prev = parallel_state._TP
    parallel_state._TP = TPGroup(rank, world_size, torch.device("cpu"))
    try:
        yield
    finally:
        parallel_state._TP = prev


def build(folder: str, rank: int, world_size: int, load_format: str) -> torch.nn.Module:
    config = create_engine_config(folder, load_format=load_format, device="cpu")
    with as_rank(rank, world_size):
        return load_model(config.model_config, torch.device("cpu"))


@pytest.mark.parametrize("kv_heads", [2, 1])  # split, replicated
def test_rank_loads_its_part_of_the_checkpoint(tiny_checkpoint, kv_heads: int) -> None:
    folder = tiny_checkpoint("llama", num_key_value_heads=kv_heads)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        ckpt = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    head_dim = 16  # hidden 64 / 4 heads
    for rank in (0, 1):
        model = build(str(folder), rank, 2, "auto")
        attn = model.model.layers[0].self_attn
        q, k, v = attn.qkv_proj.weight.split([attn.q_size, attn.kv_size, attn.kv_size])
        p = "model.layers.0."
        assert torch.equal(q, ckpt[p + "self_attn.q_proj.weight"].chunk(2)[rank])
        kv_head = rank if kv_heads == 2 else 0
        rows = slice(kv_head * head_dim, (kv_head + 1) * head_dim)
        assert torch.equal(k, ckpt[p + "self_attn.k_proj.weight"][rows])
        assert torch.equal(v, ckpt[p + "self_attn.v_proj.weight"][rows])
        o = ckpt[p + "self_attn.o_proj.weight"].chunk(2, dim=1)[rank]
        assert torch.equal(attn.o_proj.weight, o)
        gate, up = model.model.layers[0].mlp.gate_up_proj.weight.chunk(2)
        assert torch.equal(gate, ckpt[p + "mlp.gate_proj.weight"].chunk(2)[rank])
        assert torch.equal(up, ckpt[p + "mlp.up_proj.weight"].chunk(2)[rank])
        embed = ckpt["model.embed_tokens.weight"].chunk(2)[rank]
        assert torch.equal(model.model.embed_tokens.weight, embed)


def test_dummy_weights_are_the_same_numbers_at_every_tp_size(tiny_checkpoint) -> None:
    folder = str(tiny_checkpoint("llama"))
    whole = build(folder, 0, 1, "dummy")
    ranks = [build(folder, r, 2, "dummy") for r in (0, 1)]
    for name, param in whole.named_parameters():
        parts = [dict(m.named_parameters())[name] for m in ranks]
        if "norm" in name:
            assert all(torch.equal(p, param) for p in parts)
        elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            assert torch.equal(torch.cat(parts, dim=1), param), name
        elif name.endswith("qkv_proj.weight") or name.endswith("gate_up_proj.weight"):
            # fused: each rank holds its rows of every shard, shard after shard
            layer = name.rsplit(".", 1)[0]
            offsets = [m.get_submodule(layer).shard_offsets for m in ranks]
            joined = torch.cat(
                [p.narrow(0, *o[shard]) for shard in offsets[0] for p, o in zip(parts, offsets)]
            )
            assert torch.equal(joined, param), name
        else:  # vocabulary rows
            assert torch.equal(torch.cat(parts), param), name

"""Build a model on its device and fill its weights: from *.safetensors, or random ("dummy");
then the model's process_weights_after_loading, if it has one, may fold or re-lay them.

Parameters are created directly in the compute dtype on the target device (no float32 detour);
buffers that must stay float32 (the RoPE table) say so themselves. With tensor parallelism each
rank builds only its shards (the layers read the group when built) and reads only its part of
each checkpoint tensor (a safetensors slice, indexed by the parameter's weight_loader).
"""

from __future__ import annotations

import glob
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from safetensors import safe_open
from torch import nn

from vgraph.config import ModelConfig
from vgraph.layers.linear import default_weight_loader
from vgraph.models.registry import get_model_cls


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(prev)


def load_model(config: ModelConfig, device: torch.device) -> nn.Module:
    cls = get_model_cls(config.architecture)
    with _default_dtype(config.dtype), torch.device(device):
        model = cls(config.hf_config)
    fmt = config.load_format
    if fmt == "dummy":
        init_dummy_weights(model, config.seed)
    else:
        files = sorted(glob.glob(os.path.join(config.model, "*.safetensors")))
        if not files:
            raise ValueError(
                f"model={config.model!r} has no *.safetensors files; "
                f"use load_format='dummy' for random weights"
            )
        load_safetensors(model, files)
    after_loading = getattr(model, "process_weights_after_loading", None)
    if after_loading is not None:
        after_loading()
    return model.eval()


def load_safetensors(model: nn.Module, files: list[str]) -> None:
    params = dict(model.named_parameters())
    loaded: set[tuple[str, object]] = set()
    for path in files:
        with safe_open(path, framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                mapped = model.checkpoint_name_map(name)
                if mapped is None:
                    continue
                pname, shard = mapped
                if pname not in params:
                    raise ValueError(f"{os.path.basename(path)}: unexpected tensor {name!r}")
                param = params[pname]
                loader = getattr(param, "weight_loader", default_weight_loader)
                loader(param, f.get_slice(name), shard)  # reads only this rank's part
                loaded.add((pname, shard))
    loaded_names = {p for p, _ in loaded}
    missing = sorted(set(params) - loaded_names)
    if missing:
        raise ValueError(
            f"checkpoint lacks weights for {missing[:5]}{'...' if len(missing) > 5 else ''}"
        )


def init_dummy_weights(model: nn.Module, seed: int) -> None:
    """Random weights with realistic scales: norms at 1, everything else small uniform.

    Each checkpoint tensor (parameter and shard) is drawn whole from a generator of its own,
    seeded by (seed, name, shard), and handed to the parameter's weight_loader, which keeps this
    rank's part: the same numbers at every tp size, so tp=1 and tp=2 can be compared."""
    for name, param in model.named_parameters():
        if "norm" in name:
            param.data.fill_(1.0)
            continue
        loader = getattr(param, "weight_loader", default_weight_loader)
        for shard, shape in getattr(param, "full_shapes", {None: tuple(param.shape)}).items():
            gen = torch.Generator(device=param.device)
            gen.manual_seed(seed * 1_000_003 + zlib.crc32(f"{name}:{shard}".encode()))
            values = torch.empty(shape, dtype=torch.float32, device=param.device)
            loader(param, values.uniform_(-0.02, 0.02, generator=gen), shard)

"""Build a model on its device and fill its weights: from *.safetensors, or random ("dummy").

Parameters are created directly in the compute dtype on the target device (no float32 detour);
buffers that must stay float32 (the RoPE table) say so themselves.
"""

from __future__ import annotations

import glob
import os
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
                loader(param, f.get_tensor(name).to(param.dtype), shard)
                loaded.add((pname, shard))
    loaded_names = {p for p, _ in loaded}
    missing = sorted(set(params) - loaded_names)
    if missing:
        raise ValueError(
            f"checkpoint lacks weights for {missing[:5]}{'...' if len(missing) > 5 else ''}"
        )


def init_dummy_weights(model: nn.Module, seed: int) -> None:
    """Random weights with realistic scales: norms at 1, everything else small uniform."""
    gens: dict[torch.device, torch.Generator] = {}
    for name, param in model.named_parameters():
        if "norm" in name:
            param.data.fill_(1.0)
            continue
        dev = param.device
        gen = gens.setdefault(dev, torch.Generator(device=dev).manual_seed(seed))
        values = torch.empty(param.shape, dtype=torch.float32, device=dev)
        param.data.copy_(values.uniform_(-0.02, 0.02, generator=gen))

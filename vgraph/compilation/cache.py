"""The on-disk cache of compiled pieces: one folder per (model, dtype, compile settings, code).

Layout:  <root>/<key>/manifest.json      what was compiled: factors, piece hashes, timings
         <root>/<key>/inductor/          TORCHINDUCTOR_CACHE_DIR (FX graph + AOT caches, Triton)
root is compilation_config.cache_dir, else $VGRAPH_CACHE_DIR/compile, else ~/.cache/vgraph/compile.
The key hashes everything that changes the compiled code: config.json, dtype, device, the
compilation fields that shape the split, the torch version and the source of the code that is
traced (models, layers, compilation). Dynamo still traces on every start (seconds); what a hit
skips is Inductor's code generation and C++/Triton builds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch

from vgraph.distributed.parallel_state import get_tp
from vgraph.torch_internals import point_inductor_cache_here

logger = logging.getLogger(__name__)

_TRACED_SOURCES = ("models", "layers", "compilation")  # vgraph subpackages the trace runs through


def cache_root(cache_dir: str | None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get("VGRAPH_CACHE_DIR")
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "vgraph"
    return base / "compile"


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """Hash of the vgraph code that ends up in the traced graph."""
    pkg = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for sub in _TRACED_SOURCES:
        for path in sorted((pkg / sub).rglob("*.py")):
            h.update(str(path.relative_to(pkg)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def key_factors(
    hf_config: dict[str, Any],
    dtype: torch.dtype,
    device: torch.device,
    splitting_ops: tuple[str, ...],
    use_inductor: bool,
) -> dict[str, Any]:
    factors: dict[str, Any] = {
        "config_json": hashlib.sha256(json.dumps(hf_config, sort_keys=True).encode()).hexdigest(),
        "dtype": str(dtype),
        "device": device.type,
        "splitting_ops": list(splitting_ops),
        "use_inductor": use_inductor,
        "torch": torch.__version__,
        "vgraph_source": source_hash(),
    }
    tp = get_tp()
    if tp.world_size > 1:  # each rank traces its own shards (other shapes, collectives)
        factors["tp"] = [tp.rank, tp.world_size]
    if device.type == "cuda":  # Inductor's kernels are built for one architecture
        factors["cuda_arch"] = list(torch.cuda.get_device_capability(device))
        factors["cuda"] = torch.version.cuda
    return factors


class CompileCache:
    def __init__(self, root: Path, factors: dict[str, Any]) -> None:
        self.factors = factors
        self.key = hashlib.sha256(json.dumps(factors, sort_keys=True).encode()).hexdigest()[:16]
        self.dir = root / self.key
        self.manifest_path = self.dir / "manifest.json"

    @property
    def inductor_dir(self) -> Path:
        return self.dir / "inductor"

    def use_for_inductor(self) -> None:
        """Point Inductor's caches (FX graph, AOT autograd, Triton) at this folder.

        Process-wide on purpose: kernels compiled or autotuned lazily after start-up must land
        in the same place.
        """
        self.inductor_dir.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(self.inductor_dir)  # Triton's goes under it
        point_inductor_cache_here()  # in-memory caches may point at the previous folder

    def lookup(self, graph_hashes: list[str]) -> bool:
        """True when this folder already holds the same pieces (the manifest matches)."""
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except (OSError, json.JSONDecodeError):
            return False
        return manifest.get("graph_hashes") == graph_hashes

    def store(self, graph_hashes: list[str], compile_seconds: float, num_pieces: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        manifest = {
            "factors": self.factors,
            "graph_hashes": graph_hashes,
            "num_pieces": num_pieces,
            "compile_seconds": round(compile_seconds, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        tmp.replace(self.manifest_path)  # atomic: two engines starting at once never see half

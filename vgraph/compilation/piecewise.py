"""compile_piecewise(): trace the model once at start-up and hand the runner the piecewise model.

  1. find the compile cache folder for this model and config (cache.py); with Inductor, point
     Inductor's caches at it;
  2. torch.compile(forward, backend=PiecewiseBackend, fullgraph=True) with dim 0 of input_ids and
     positions marked dynamic, every other size static;
  3. trace now, on a dummy batch of max_num_batched_tokens tokens (no KV cache yet: attention
     writes zeros), so no step ever pays for tracing;
  4. log what the split looks like, how long compiling took and whether the cache was hit.

Dynamo's guards are dropped: the model is traced once and the runner always calls it the same way
(its static int64 buffers, the same device and dtype), so a guard could only cause a recompile,
e.g. for one token, which the symbolic graph already serves. Each engine compiles a fresh copy of
the forward's code object, so two engines in one process never share a compiled entry.
"""

from __future__ import annotations

import itertools
import logging
import time
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from vgraph.compilation.backend import PiecewiseBackend
from vgraph.compilation.cache import CompileCache, cache_root, key_factors
from vgraph.config import ATTENTION_OP
from vgraph.cudagraph.backends import GraphBackend
from vgraph.forward_context import ForwardContext, set_forward_context
from vgraph.torch_internals import current_dispatch_mode, inductor_cache_counts, mark_dynamic

if TYPE_CHECKING:
    from vgraph.config import VGraphConfig

logger = logging.getLogger(__name__)

_copies = itertools.count()


@dataclass(frozen=True)
class CompileStats:
    cache_dir: str
    cache_hit: bool  # the cache folder already held these pieces
    compile_seconds: float  # trace + split + Inductor (or its cache loads)
    num_pieces: int  # captured pieces (num_layers + 1 for the default split)
    num_splitting_ops: int  # eager ops between them
    inductor_cache_hits: int
    inductor_cache_misses: int


class PiecewiseModel:
    """callable(input_ids [T], positions [T]) -> hidden [T, hidden_size]; other attributes of
    the model (compute_logits, config, ...) pass through."""

    def __init__(
        self,
        model: torch.nn.Module,
        compiled: Callable[..., torch.Tensor],
        backend: PiecewiseBackend,
        stats: CompileStats,
    ) -> None:
        self.model = model
        self.compiled = compiled
        self.backend = backend
        self.stats = stats

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if current_dispatch_mode() is not None:
            # the CPU recorder capturing a FULL graph: Dynamo refuses to run under a dispatch
            # mode, and the eager model issues the same ops for the recorder to freeze
            return self.model(input_ids, positions)
        return self.compiled(input_ids, positions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["model"], name)


def compile_piecewise(
    model: torch.nn.Module, config: VGraphConfig, graph_backend: GraphBackend
) -> PiecewiseModel:
    cc, mc = config.compilation_config, config.model_config
    assert cc.splitting_ops, "piecewise compilation needs splitting ops"
    cache = CompileCache(
        cache_root(cc.cache_dir),
        key_factors(mc.hf_config, mc.dtype, config.device, cc.splitting_ops, bool(cc.use_inductor)),
    )
    if cc.use_inductor:
        cache.use_for_inductor()
    backend = PiecewiseBackend(cc.splitting_ops, bool(cc.use_inductor), graph_backend)
    compiled = torch.compile(
        _fresh_forward(model),
        backend=_BackendHandle(backend),
        fullgraph=True,
        dynamic=False,
        options={"guard_filter_fn": _drop_all_guards},
    )

    hits0, misses0 = inductor_cache_counts()
    t0 = time.perf_counter()
    _trace(compiled, trace_num_tokens(config), config.device)
    seconds = time.perf_counter() - t0
    if backend.missing_ops:
        raise ValueError(
            f"compilation config: splitting_ops {backend.missing_ops} do not occur in the "
            f"model; the attention op is {ATTENTION_OP!r} (vLLM's name for it is accepted too)"
        )
    hits, misses = (a - b for a, b in zip(inductor_cache_counts(), (hits0, misses0)))

    hashes = backend.graph_hashes()
    cache_hit = cache.lookup(hashes)
    if not cache_hit:
        cache.store(hashes, seconds, backend.num_pieces)
    stats = CompileStats(
        str(cache.dir),
        cache_hit,
        seconds,
        backend.num_pieces,
        len(backend.items) - backend.num_pieces,
        hits,
        misses,
    )
    logger.info(
        "piecewise compile: %d pieces around %d %s call(s), inductor %s, %.2f s; compile cache "
        "%s (%s)%s",
        stats.num_pieces,
        stats.num_splitting_ops,
        "/".join(cc.splitting_ops),
        "on" if cc.use_inductor else "off",
        seconds,
        "hit" if cache_hit else "miss",
        cache.dir,
        f"; inductor {backend.inductor_seconds:.2f} s of it, cache {hits} hit(s), {misses} miss(es)"
        if cc.use_inductor
        else "",
    )
    logger.debug("split: %s", backend.describe())
    return PiecewiseModel(model, compiled, backend, stats)


def _fresh_forward(model: torch.nn.Module) -> Callable[..., torch.Tensor]:
    """model.forward as a new function object, bound to model.

    A new code object: Dynamo keeps compiled entries per code object, and with no guards another
    engine's entry would match this one's calls. New globals (a copy): Dynamo stores each
    compiled function in the globals of the frame it compiled, which would otherwise be the model
    module's own namespace, one entry per engine for the life of the process.
    """
    fn = type(model).forward
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_vgraph{next(_copies)}")
    copy = types.FunctionType(
        code, dict(fn.__globals__), fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__kwdefaults__ = fn.__kwdefaults__
    return types.MethodType(copy, model)


class _BackendHandle:
    """What torch.compile is given. Dynamo keeps every backend it saw in a global dict, so it
    gets a weak reference: the backend (owned by PiecewiseModel), its pieces and their graphs
    die with the engine."""

    def __init__(self, backend: PiecewiseBackend) -> None:
        self.ref = weakref.ref(backend)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        backend = self.ref()
        assert backend is not None, "traced after the engine was dropped"
        return backend(gm, example_inputs)


def _drop_all_guards(guards: list[Any]) -> list[bool]:
    return [False for _ in guards]


def trace_num_tokens(config: VGraphConfig) -> int:
    """Tokens of the one traced call: the largest piecewise capture size (Inductor takes the
    traced size as its hint, and pieces are captured up to it), at least 2 (Dynamo specialises
    0 and 1). The trace really runs the model: tracing at max_num_batched_tokens cost the CPU
    a whole 8192-token forward at every start."""
    sizes = config.compilation_config.piecewise_capture_sizes
    top = max(sizes) if sizes else config.scheduler_config.max_num_batched_tokens
    return max(2, top)


@torch.inference_mode()
def _trace(compiled: Callable[..., torch.Tensor], num_tokens: int, device: torch.device) -> None:
    input_ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)  # [T]
    positions = torch.zeros(num_tokens, dtype=torch.int64, device=device)  # [T]
    mark_dynamic(input_ids, 0)
    mark_dynamic(positions, 0)
    with set_forward_context(ForwardContext(attn_metadata=None)):  # runtime mode: eager
        compiled(input_ids, positions)

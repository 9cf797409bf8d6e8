"""The model runner's graphs: what its forward is made of, and capturing every graph key.

1. build_forward (load_model): the model, traced and split into pieces bound to PIECEWISE when
   the mode needs them (model_fn), and ForwardWithLogits, that forward plus the LM head on each
   request's last token, wrapped in one graph wrapper bound to FULL when the mode has FULL graphs
   (logits_fn).
2. capture_graphs (capture_model, after the KV cache exists): every key of the dispatcher, FULL
   first, each phase largest first, after warm-ups, one progress bar per phase; the number of
   graphs, the seconds and the memory go into GraphStats and the log.
It holds no buffers and no KV cache: the runner passes in how to prepare a dummy step and its own
execute_forward, so a capture runs the code a replay runs. It must not decide which keys exist
(the dispatcher does) and does nothing at step time.
"""

from __future__ import annotations

import itertools
import logging
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from tqdm import tqdm

from vgraph.attention.backend import CommonAttentionMetadata
from vgraph.config import VGraphConfig
from vgraph.config.modes import CUDAGraphMode
from vgraph.cudagraph.backends import GraphBackend
from vgraph.cudagraph.counters import GraphStats
from vgraph.cudagraph.dispatcher import BatchDescriptor
from vgraph.cudagraph.wrapper import CUDAGraphWrapper
from vgraph.distributed.parallel_state import check_same_on_all_ranks
from vgraph.forward_context import get_forward_context
from vgraph.worker.input_batch import StepInputs

logger = logging.getLogger(__name__)
GraphKey = tuple[CUDAGraphMode, BatchDescriptor]
DummyStep = tuple[StepInputs, CommonAttentionMetadata]  # a key's padded counts, all pad tokens
PrepareDummy = Callable[[CUDAGraphMode, BatchDescriptor], DummyStep]  # (runtime mode, key) ->


class StepLogits(NamedTuple):
    """What a step's forward hands the sampler: each request's logits [num_reqs_padded, V]
    (float32, or the model's dtype from a fused head: the sampler widens them where it needs to),
    and where the head computes them (models' compute_logits_and_greedy), the argmax of each row
    [num_reqs_padded] int64, so a FULL graph ends with the greedy tokens."""

    logits: torch.Tensor
    greedy: torch.Tensor | None = None


HeadFn = Callable[[torch.Tensor], "tuple[torch.Tensor, torch.Tensor | None]"]  # hidden -> both


def head_fn(model: torch.nn.Module) -> HeadFn:
    """The model's head with its greedy tokens where it has them, else its logits alone."""
    both = getattr(model, "compute_logits_and_greedy", None)
    if both is not None:
        return both
    return lambda hidden: (model.compute_logits(hidden), None)


class ForwardWithLogits:
    """The model, then the LM head on each request's last token: what a FULL graph captures, so
    the head runs inside the graph as well, with the greedy tokens where the head has them. A
    FULL key's pad requests have empty query ranges ending at the last real token, so their rows
    are valid and the caller slices them off. Where the forward context carries the step's input
    copy (FULL), it runs first: a FULL graph starts with the host-to-device copy of its inputs,
    one launch fewer on the host per step. A uniform decode key (one token per request) needs no
    gather of the last tokens: three kernels fewer in every FULL decode graph."""

    def __init__(self, model_fn: Callable[..., torch.Tensor], head: HeadFn) -> None:
        self.model_fn = model_fn
        self.head = head

    def __call__(
        self,
        input_ids: torch.Tensor,  # [num_tokens_padded] int64
        positions: torch.Tensor,  # [num_tokens_padded] int64
        query_start_loc: torch.Tensor,  # [num_reqs_padded + 1] int32
    ) -> StepLogits:
        ctx = get_forward_context()
        if ctx.copy_inputs is not None:
            ctx.copy_inputs()
        hidden = self.model_fn(input_ids, positions)  # [num_tokens_padded, hidden_size]
        key = ctx.batch_descriptor
        if key is None or not key.uniform:
            last = query_start_loc[1:].long() - 1  # [num_reqs_padded]
            hidden = hidden[last]
        # else one token per request: row r is request r's (pad rows: pad tokens', sliced off)
        return StepLogits(*self.head(hidden))


def build_forward(
    model: torch.nn.Module,
    config: VGraphConfig,
    mode: CUDAGraphMode,
    graph_backend: GraphBackend,
) -> tuple[Callable[..., torch.Tensor], Callable[..., StepLogits]]:
    """-> (model_fn: the model, maybe piecewise; logits_fn: model_fn + LM head, maybe FULL)."""
    model_fn: Callable[..., torch.Tensor] = model
    if mode.needs_piecewise():
        from vgraph.compilation.piecewise import compile_piecewise

        model_fn = compile_piecewise(model, config, graph_backend)
    logits_fn: Callable[..., StepLogits] = ForwardWithLogits(model_fn, head_fn(model))
    if mode.has_full():
        logits_fn = CUDAGraphWrapper(logits_fn, CUDAGraphMode.FULL, graph_backend)
    return model_fn, logits_fn


def capture_graphs(
    keys: list[GraphKey],
    prepare_dummy: PrepareDummy,
    execute_forward: Callable[..., torch.Tensor],
    graph_backend: GraphBackend,
    num_warmups: int,
    stats: GraphStats,
    mode: CUDAGraphMode,
) -> None:
    """Capture the keys in order: num_warmups eager runs of each dummy step (none where the
    backend's capture is itself an eager run), then the capturing run. mode: the resolved
    cudagraph_mode, for the log."""
    # ranks that captured different keys would replay different collectives: check once
    check_same_on_all_ranks(zlib.crc32(repr(keys).encode()), "the graph keys to capture")
    if not keys:
        return
    t0, mem0 = time.perf_counter(), graph_backend.memory_in_use()
    mem = mem0
    if not graph_backend.warmup_before_capture:
        num_warmups = 0
    for runtime_mode, key in _capture_bars(keys):
        step, common = prepare_dummy(runtime_mode, key)
        for _ in range(num_warmups):
            execute_forward(step, common)
        execute_forward(step, common, runtime_mode, key, capturing=True)
        mem, before = graph_backend.memory_in_use(), mem
        per_size = stats.graph_memory_bytes_per_size
        per_size[key.num_tokens] = per_size.get(key.num_tokens, 0) + max(mem - before, 0)
    stats.num_graphs = len(keys)
    stats.capture_seconds = time.perf_counter() - t0
    stats.graph_memory_bytes = max(mem - mem0, 0)
    logger.info(
        "captured %d graphs (%s) in %.1f s, taking %.3f GiB",
        stats.num_graphs,
        mode.name,
        stats.capture_seconds,
        stats.graph_memory_bytes / 2**30,
    )


def _capture_bars(keys: list[GraphKey]) -> Iterator[Any]:
    """The keys in order, one progress bar per phase, named as vLLM's: (decode, FULL),
    (mixed prefill-decode, FULL) or (mixed prefill-decode, PIECEWISE)."""
    for (mode, uniform), group in itertools.groupby(keys, lambda k: (k[0], k[1].uniform)):
        phase = "decode" if uniform else "mixed prefill-decode"
        yield from tqdm(list(group), desc=f"Capturing graphs ({phase}, {mode.name})", unit="graph")

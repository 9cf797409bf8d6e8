"""Model runner: load, allocate the KV cache, capture graphs, execute one step. An orchestrator
of the parts: each stage is one method, called in this order by execute_model():
  1. dispatch: the cascade decision (a decode batch sharing a long prefix), then the runtime
     mode (FULL / PIECEWISE / NONE; never FULL for cascade), graph key, padded counts
  2. prepare_inputs: SchedulerOutput -> persistent buffers (padded) -> CommonAttentionMetadata
  3. execute_forward: the model (or its graph replay) under a ForwardContext
  4. sample: logits of each request's last token -> logits processors and Sampler, on the
     device, outside every graph (penalties, bias, bans, the structured-output bitmask)
  5. to_host: one device-to-host copy of the sampled ids (and logprobs) -> ModelRunnerOutput
With tensor parallelism every rank has a runner over its shards. Rank 0's (in the engine core)
broadcasts each step's inputs and dispatch decision (a TPStep) after step 2; the workers run
steps 2-3 from it (execute_broadcast_step) and never sample.
A step that scores prompt tokens (prompt_logprobs) needs every token's hidden state: it runs the
model without the head (never a FULL graph) and the head on those rows too (prompt_logprobs.py).
"""

from __future__ import annotations

import gc
import itertools
import logging
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from vgraph.attention.backend import (
    AttentionBackend,
    AttentionPlanner,
    AttentionSpec,
    CommonAttentionMetadata,
)
from vgraph.attention.cascade import CascadeCostRule
from vgraph.attention.selector import get_backend_cls
from vgraph.config import VGraphConfig
from vgraph.config.modes import CUDAGraphMode
from vgraph.core.scheduler import SchedulerOutput
from vgraph.cudagraph.backends import make_graph_backend
from vgraph.cudagraph.counters import GraphStats
from vgraph.cudagraph.dispatcher import BatchDescriptor, CudagraphDispatcher, EagerReason
from vgraph.cudagraph.wrapper import CUDAGraphWrapper
from vgraph.distributed.messages import TPStep
from vgraph.distributed.parallel_state import check_same_on_all_ranks, min_over_ranks
from vgraph.forward_context import ForwardContext, set_forward_context
from vgraph.layers.attention import Attention
from vgraph.layers.linear import num_kv_heads_per_rank
from vgraph.models.loader import load_model
from vgraph.outputs import TokenLogprobs
from vgraph.sample.sampler import Sampler, SamplerOutput
from vgraph.utils import cdiv
from vgraph.worker.input_batch import InputBuffers, StepInputs
from vgraph.worker.memory import DeviceMemory, kv_cache_budget
from vgraph.worker.prompt_logprobs import (
    PromptSpan,
    compute_prompt_logprobs,
    prompt_logprob_spans,
)
from vgraph.worker.sampling_inputs import HostStaging, PenaltyTokens, build_sampling_metadata

logger = logging.getLogger(__name__)
BitmaskFn = Callable[[], "torch.Tensor | None"]  # -> [R, ceil(V / 32)] int32 host bitmask


class ForwardWithLogits:
    """The model, then the LM head on each request's last token: what a FULL graph captures, so
    the head runs inside the graph as well. A FULL key's pad requests have empty query ranges
    ending at the last real token, so their rows are valid and the caller slices them off."""

    def __init__(
        self,
        model_fn: Callable[..., torch.Tensor],
        compute_logits: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        self.model_fn = model_fn
        self.compute_logits = compute_logits

    def __call__(
        self,
        input_ids: torch.Tensor,  # [num_tokens_padded] int64
        positions: torch.Tensor,  # [num_tokens_padded] int64
        query_start_loc: torch.Tensor,  # [num_reqs_padded + 1] int32
    ) -> torch.Tensor:  # [num_reqs_padded, vocab_size] float32
        hidden = self.model_fn(input_ids, positions)  # [num_tokens_padded, hidden_size]
        last = query_start_loc[1:].long() - 1  # [num_reqs_padded]
        return self.compute_logits(hidden[last])


@dataclass
class ModelRunnerOutput:
    sampled_token_ids: list[int]  # one per scheduled request, in batch order
    logprobs: list[TokenLogprobs | None]
    # batch row -> the prompt tokens this step scored (requests with prompt_logprobs only)
    prompt_logprobs: dict[int, list[TokenLogprobs]] = field(default_factory=dict)


class ModelRunner:
    def __init__(self, config: VGraphConfig) -> None:
        self.config = config
        self.device = config.device
        mc, sc, cc = config.model_config, config.scheduler_config, config.cache_config
        self.dtype = mc.dtype
        self.block_size = cc.block_size
        self.max_num_tokens = sc.max_num_batched_tokens
        self.max_num_reqs = sc.max_num_seqs
        self.max_blocks_per_req = cdiv(sc.max_model_len, cc.block_size)
        self.attention_backend: type[AttentionBackend] = get_backend_cls(config.attention_backend)
        self.buffers = InputBuffers(
            self.max_num_tokens,
            self.max_num_reqs,
            self.max_blocks_per_req,
            cc.block_size,
            self.device,
        )
        self.compilation_config = comp = config.compilation_config
        self.cudagraph_mode: CUDAGraphMode = comp.cudagraph_mode
        self.dispatcher = CudagraphDispatcher(
            self.cudagraph_mode,
            comp.cudagraph_capture_sizes or (),
            self.attention_backend.cudagraph_support,
            self.max_num_reqs,
            comp.piecewise_capture_sizes,
        )
        self.graph_backend = make_graph_backend(self.device)
        # where cascade attention pays (None: off, by config or for want of backend support)
        self.cascade_rule: CascadeCostRule | None = None
        if cc.enable_cascade_attention and self.attention_backend.supports_cascade(self.device):
            self.cascade_rule = CascadeCostRule()
        self.graph_stats = GraphStats()
        self.sampler = Sampler()
        self.staging = HostStaging(self.device)  # the sampling processors' one host-to-device copy
        self.penalty_tokens = PenaltyTokens()  # penalised requests' token codes, across steps
        self.generators: dict[str, torch.Generator] = {}
        self.model: torch.nn.Module | None = None
        self.model_fn: Callable[..., torch.Tensor] | None = None  # model, maybe piecewise
        self.logits_fn: Callable[..., torch.Tensor] | None = None  # + LM head, maybe FULL graph
        self.attn_layers: dict[str, Attention] = {}
        self.planner: AttentionPlanner | None = None  # the backend's per-step host work
        self.kv_caches: dict[str, torch.Tensor] = {}
        self.num_blocks = 0
        self.memory_before_load = DeviceMemory(0, 0, 0, 0)  # read again by load_model
        self.model_bytes = 0  # weights this engine put on the device
        # tp > 1, rank 0: sends each step to the worker ranks (TPWorkers.broadcast)
        self.broadcast: Callable[[TPStep], None] | None = None

    # ---- start-up -------------------------------------------------------------------------
    def load_model(self) -> None:
        t0 = time.perf_counter()
        self.memory_before_load = DeviceMemory.now(self.device)
        torch.manual_seed(self.config.model_config.seed)
        self.model = load_model(self.config.model_config, self.device)
        loaded = DeviceMemory.now(self.device)
        self.model_bytes = loaded.allocated - self.memory_before_load.allocated
        for module in self.model.modules():
            if isinstance(module, Attention):
                module.impl = self.attention_backend.impl_cls(
                    module.num_heads, module.num_kv_heads, module.head_dim, module.scale
                )
                self.attn_layers[module.layer_name] = module
        self.planner = self._make_planner()
        runnable: Callable[..., torch.Tensor] = self.model
        if self.cudagraph_mode.needs_piecewise():
            from vgraph.compilation.piecewise import compile_piecewise

            runnable = compile_piecewise(self.model, self.config, self.graph_backend)
        self.model_fn = runnable
        self.logits_fn = ForwardWithLogits(runnable, self.model.compute_logits)
        if self.cudagraph_mode.has_full():
            self.logits_fn = CUDAGraphWrapper(
                self.logits_fn, CUDAGraphMode.FULL, self.graph_backend
            )
        logger.info(
            "loaded %s (%s, %s) in %.1f s",
            self.config.model_config.name,
            self.config.model_config.architecture,
            self.dtype,
            time.perf_counter() - t0,
        )

    def _make_planner(self) -> AttentionPlanner | None:
        layer = next(iter(self.attn_layers.values()))
        planner = self.attention_backend.make_planner(
            AttentionSpec(
                num_heads=layer.num_heads,
                num_kv_heads=layer.num_kv_heads,
                head_dim=layer.head_dim,
                scale=layer.scale,
                block_size=self.block_size,
                dtype=self.dtype,
                device=self.device,
                max_num_reqs=self.max_num_reqs,
                max_blocks_per_req=self.max_blocks_per_req,
                cascade=self.cascade_rule is not None,
            )
        )
        if planner is not None:
            planner.warm_up()
        return planner

    def initialize_kv_cache(self) -> int:
        """Size and allocate the paged KV cache; returns the number of usable blocks."""
        mc, cc = self.config.model_config, self.config.cache_config
        num_kv_heads = num_kv_heads_per_rank(mc.num_kv_heads)  # this rank's
        per_block = (
            2 * mc.num_layers * self.block_size * num_kv_heads * mc.head_dim * self.dtype.itemsize
        )
        if cc.num_gpu_blocks_override is not None:
            num_blocks = cc.num_gpu_blocks_override
        elif self.device.type == "cuda":
            num_blocks = self._profile_free_bytes() // per_block
        else:
            num_blocks = cc.cpu_kv_cache_bytes // per_block
        num_blocks = min_over_ranks(num_blocks)  # every rank holds the same blocks
        if num_blocks < 1:
            raise ValueError(
                "no memory is left for the KV cache; raise gpu_memory_utilization / "
                "cpu_kv_cache_bytes or lower max_num_batched_tokens (on CUDA the cache is also "
                "capped at the memory the device has free)"
            )
        shape = self.attention_backend.kv_cache_shape(
            num_blocks + 1, self.block_size, num_kv_heads, mc.head_dim
        )  # one spare block: the write target of pad tokens for backends that need one
        for name in self.attn_layers:
            self.kv_caches[name] = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.num_blocks = num_blocks
        logger.info(
            "KV cache: %d blocks of %d tokens (%.2f GiB)",
            num_blocks,
            self.block_size,
            num_blocks * per_block / 2**30,
        )
        return num_blocks

    def _profile_free_bytes(self) -> int:
        """Run the largest step without a KV cache; what is left of this engine's share of the
        device (gpu_memory_utilization) after weights, activations and CUDA libraries is the
        cache. Other engines and processes on the device only cap it at what is free."""
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        baseline = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        n = self.max_num_tokens
        ids = torch.zeros(n, dtype=torch.int64, device=self.device)
        with set_forward_context(ForwardContext(attn_metadata=None)):
            hidden = self.model(ids, ids)
        logits = self.model.compute_logits(hidden[: min(n, self.max_num_reqs)])
        logits.sort(dim=-1)
        del hidden, logits
        torch.cuda.synchronize()
        activations = torch.cuda.max_memory_allocated() - baseline
        torch.cuda.empty_cache()
        return kv_cache_budget(
            self.memory_before_load,
            DeviceMemory.now(self.device),
            self.config.cache_config.gpu_memory_utilization,
            self.model_bytes,
            activations,
        )

    def release(self) -> None:
        """Drop the graphs, KV cache and weights; the runner can't execute afterwards."""
        self.model_fn = self.logits_fn = self.model = None
        self.kv_caches.clear()
        self.attn_layers.clear()
        gc.collect()  # graph wrappers and compiled pieces hold cycles
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- one step ---------------------------------------------------------------------------
    @torch.inference_mode()
    def execute_model(
        self, sched: SchedulerOutput, grammar_bitmask: BitmaskFn | None = None
    ) -> ModelRunnerOutput:
        """grammar_bitmask: fills the step's structured-output bitmask (a host tensor, or None);
        called once the forward is issued and the sampling inputs are built, so that the host
        fills while the device computes the logits."""
        for rid in sched.finished_req_ids:
            self.generators.pop(rid, None)
            self.penalty_tokens.forget(rid)
        num_prefix_blocks = self.cascade_prefix_blocks(sched)
        spans = prompt_logprob_spans(sched)
        mode, key, t_pad, r_pad = self.dispatch(sched, use_cascade=num_prefix_blocks > 0)
        step, common = self.prepare_inputs(sched, t_pad, r_pad, num_prefix_blocks)
        if self.broadcast is not None:
            self.broadcast(self.step_message(sched, step, mode, key, num_prefix_blocks))
        if spans:
            logits, prompt_lps = self.execute_with_prompt_logprobs(
                sched, step, common, mode, key, spans
            )
        else:
            logits, prompt_lps = self.execute_forward(step, common, mode, key), {}
        out = self.sample(sched, step, logits, grammar_bitmask)
        result = self.to_host(sched, out)
        result.prompt_logprobs = prompt_lps
        return result

    def cascade_prefix_blocks(self, sched: SchedulerOutput) -> int:
        """Blocks of the prefix a uniform decode step attends as cascade (0: plain attention):
        the leading blocks all its requests share, where the cost rule says cascade pays."""
        if self.cascade_rule is None or not sched.is_uniform_decode:
            return 0
        computed = [r.num_computed_tokens for r in sched.requests]
        return self.cascade_rule.prefix_blocks(sched.block_ids, computed, self.block_size)

    def step_message(
        self,
        sched: SchedulerOutput,
        step: StepInputs,
        mode: CUDAGraphMode,
        key: BatchDescriptor | None,
        num_common_prefix_blocks: int = 0,
    ) -> TPStep:
        """The step for the worker ranks: the inputs just prepared and this dispatch."""
        return TPStep(
            token_ids=self.buffers.input_ids.np[: step.num_tokens].tobytes(),
            num_computed=[r.num_computed_tokens for r in sched.requests],
            num_scheduled=list(sched.num_scheduled_tokens),
            block_ids=sched.block_ids,
            mode=mode.name,
            key=None if key is None else tuple(key),
            num_tokens_padded=None if key is None else step.num_tokens_padded,
            num_reqs_padded=step.num_reqs_padded if mode is CUDAGraphMode.FULL else None,
            num_common_prefix_blocks=num_common_prefix_blocks,
        )

    @torch.inference_mode()
    def execute_broadcast_step(self, msg: TPStep) -> None:
        """A worker rank's step: rank 0's inputs and dispatch; the logits are not used."""
        mode = CUDAGraphMode[msg.mode]
        key = None if msg.key is None else BatchDescriptor(*msg.key)
        step = self.buffers.prepare_broadcast(
            msg.token_ids,
            msg.num_computed,
            msg.num_scheduled,
            msg.block_ids,
            msg.num_tokens_padded,
            msg.num_reqs_padded,
        )
        common = self.build_common_metadata(
            step, num_common_prefix_blocks=msg.num_common_prefix_blocks
        )
        self.execute_forward(step, common, mode, key)

    def dispatch(
        self, sched: SchedulerOutput, use_cascade: bool = False
    ) -> tuple[CUDAGraphMode, BatchDescriptor | None, int | None, int | None]:
        """-> (runtime mode, graph key, padded token count, padded request count). A step that
        scores prompt tokens needs every token's hidden state, which no FULL graph returns."""
        num_tokens = sched.total_num_scheduled_tokens
        mode, key, why = self.dispatcher.dispatch(num_tokens, sched.is_uniform_decode, use_cascade)
        if mode is CUDAGraphMode.FULL and prompt_logprob_spans(sched):
            # a step that scores prompt tokens needs every hidden state: no FULL graph
            mode, key, why = self.dispatcher.dispatch(num_tokens, False, use_cascade)
            if mode is CUDAGraphMode.FULL:
                mode, key, why = CUDAGraphMode.NONE, None, EagerReason.PROMPT_LOGPROBS
        t_pad = None if key is None else key.num_tokens
        r_pad = self.dispatcher.num_reqs_padded(key) if mode is CUDAGraphMode.FULL else None
        self.graph_stats.record_step(
            mode, why, num_tokens, t_pad or num_tokens, sched.is_uniform_decode
        )
        return mode, key, t_pad, r_pad

    def prepare_inputs(
        self,
        sched: SchedulerOutput,
        num_tokens_padded: int | None = None,
        num_reqs_padded: int | None = None,
        num_common_prefix_blocks: int = 0,
    ) -> tuple[StepInputs, CommonAttentionMetadata]:
        """num_reqs_padded is given for FULL replays only (the graph's request count)."""
        step = self.buffers.prepare(sched, num_tokens_padded, num_reqs_padded)
        common = self.build_common_metadata(
            step,
            full_graph=num_reqs_padded is not None,
            num_common_prefix_blocks=num_common_prefix_blocks,
        )
        return step, common

    def build_common_metadata(
        self,
        step: StepInputs,
        for_capture: bool = False,
        full_graph: bool = False,
        num_common_prefix_blocks: int = 0,
    ) -> CommonAttentionMetadata:
        """The step's attention metadata, planned by the backend's planner if it has one
        (full_graph: the step replays or captures a FULL graph)."""
        b = self.buffers
        common = CommonAttentionMetadata(
            query_start_loc=b.query_start_loc.gpu[: step.num_reqs_padded + 1],
            seq_lens=b.seq_lens.gpu[: step.num_reqs_padded],
            block_table=b.block_table.gpu,
            slot_mapping=b.slot_mapping.gpu[: step.num_tokens_padded],
            query_start_loc_cpu=b.query_start_loc.cpu[: step.num_reqs + 1],
            seq_lens_cpu=b.seq_lens.cpu[: step.num_reqs],
            block_table_cpu=b.block_table.cpu,
            num_reqs=step.num_reqs,
            num_actual_tokens=step.num_tokens,
            max_query_len=step.max_query_len,
            max_seq_len=step.max_seq_len,
            for_capture=for_capture,
            num_common_prefix_blocks=num_common_prefix_blocks,
        )
        if self.planner is not None:
            self.planner.plan(common, full_graph)
        return common

    def execute_forward(
        self,
        step: StepInputs,
        common: CommonAttentionMetadata,
        mode: CUDAGraphMode = CUDAGraphMode.NONE,
        key: BatchDescriptor | None = None,
        capturing: bool = False,
    ) -> torch.Tensor:
        """Returns float32 logits of each request's last token [num_reqs_padded, vocab_size]."""
        n, r = step.num_tokens_padded, step.num_reqs_padded
        ctx = ForwardContext(
            attn_metadata=common,
            kv_caches=self.kv_caches,
            attn_layers=self.attn_layers,
            runtime_mode=mode,
            batch_descriptor=key,
            capturing=capturing,
        )
        with set_forward_context(ctx):
            return self.logits_fn(
                self.buffers.input_ids.gpu[:n],
                self.buffers.positions.gpu[:n],
                self.buffers.query_start_loc.gpu[: r + 1],
            )

    def execute_with_prompt_logprobs(
        self,
        sched: SchedulerOutput,
        step: StepInputs,
        common: CommonAttentionMetadata,
        mode: CUDAGraphMode,
        key: BatchDescriptor | None,
        spans: list[PromptSpan],
    ) -> tuple[torch.Tensor, dict[int, list[TokenLogprobs]]]:
        """The model without a FULL graph, then the head on the last tokens and the prompt
        tokens to score: (logits [num_reqs_padded, V], row -> prompt logprobs)."""
        assert mode is not CUDAGraphMode.FULL and self.model is not None
        n, r = step.num_tokens_padded, step.num_reqs_padded
        ctx = ForwardContext(
            attn_metadata=common,
            kv_caches=self.kv_caches,
            attn_layers=self.attn_layers,
            runtime_mode=mode,
            batch_descriptor=key,
        )
        with set_forward_context(ctx):
            hidden = self.model_fn(self.buffers.input_ids.gpu[:n], self.buffers.positions.gpu[:n])
        last = self.buffers.query_start_loc.gpu[1 : r + 1].long() - 1  # [num_reqs_padded]
        logits = self.model.compute_logits(hidden[last]).float()
        return logits, compute_prompt_logprobs(hidden, self.model.compute_logits, sched, spans)

    def sample(
        self,
        sched: SchedulerOutput,
        step: StepInputs,
        logits: torch.Tensor,  # [num_reqs_padded, vocab_size] float32
        grammar_bitmask: BitmaskFn | None = None,
    ) -> SamplerOutput:
        """The sampling inputs are built first, then the bitmask is filled and joins them: all
        host work while the device computes the logits."""
        md = build_sampling_metadata(
            sched.requests,
            self.generators,
            self.device,
            staging=self.staging,
            bitmask_follows=grammar_bitmask is not None,
            penalty_tokens=self.penalty_tokens,
        )
        bitmask = None if grammar_bitmask is None else grammar_bitmask()
        if bitmask is not None:
            assert md.processors is not None
            md.processors.bitmask = bitmask.to(self.device, non_blocking=True)
        return self.sampler(logits[: step.num_reqs], md)

    def to_host(self, sched: SchedulerOutput, out: SamplerOutput) -> ModelRunnerOutput:
        """The step's one device-to-host transfer (logprobs packed beside the ids)."""
        if out.logprobs is None:
            return ModelRunnerOutput(out.token_ids.tolist(), [None] * len(sched.requests))
        # float64 holds token ids exactly, so one tensor carries everything
        packed = (
            torch.cat(
                [out.token_ids[:, None], out.ranks[:, None], out.logprob_token_ids, out.logprobs],
                1,
            )
            .double()
            .tolist()
        )
        width = out.logprobs.shape[1]
        token_ids, entries = [], []
        for row, req in zip(packed, sched.requests):
            token_ids.append(int(row[0]))
            n = req.sampling_params.logprobs
            if n is None:
                entries.append(None)
                continue
            ids = [int(t) for t in row[2 : 3 + n]]
            entries.append(TokenLogprobs(ids, row[2 + width : 3 + width + n], int(row[1])))
        return ModelRunnerOutput(token_ids, entries)

    # ---- graphs -----------------------------------------------------------------------------
    @torch.inference_mode()
    def capture_model(self) -> None:
        """Capture every key of the dispatcher, FULL first, each largest first, after warm-ups.

        Runs after the KV cache exists; dummy batches write only to slot -1.
        """
        keys = self.dispatcher.capture_keys()
        # ranks that captured different keys would replay different collectives: check once
        check_same_on_all_ranks(zlib.crc32(repr(keys).encode()), "the graph keys to capture")
        if not keys:
            return
        c = self.graph_stats
        t0, mem0 = time.perf_counter(), self.graph_backend.memory_in_use()
        mem = mem0
        warmups = self.compilation_config.cudagraph_num_of_warmups
        if not self.graph_backend.warmup_before_capture:
            warmups = 0
        for mode, key in _capture_bars(keys):
            step = self.buffers.prepare_dummy(key.num_tokens, self.dispatcher.num_reqs_padded(key))
            full = mode is CUDAGraphMode.FULL
            common = self.build_common_metadata(step, for_capture=full, full_graph=full)
            for _ in range(warmups):
                self.execute_forward(step, common)
            self.execute_forward(step, common, mode, key, capturing=True)
            mem, before = self.graph_backend.memory_in_use(), mem
            per_size = c.graph_memory_bytes_per_size
            per_size[key.num_tokens] = per_size.get(key.num_tokens, 0) + max(mem - before, 0)
        c.num_graphs = len(keys)
        c.capture_seconds = time.perf_counter() - t0
        c.graph_memory_bytes = max(mem - mem0, 0)
        logger.info(
            "captured %d graphs (%s) in %.1f s, taking %.3f GiB",
            c.num_graphs,
            self.cudagraph_mode.name,
            c.capture_seconds,
            c.graph_memory_bytes / 2**30,
        )


def _capture_bars(keys: list[tuple[CUDAGraphMode, BatchDescriptor]]) -> Iterator[Any]:
    """The keys in order, one progress bar per phase, named as vLLM's: (decode, FULL),
    (mixed prefill-decode, FULL) or (mixed prefill-decode, PIECEWISE)."""
    for (mode, uniform), group in itertools.groupby(keys, lambda k: (k[0], k[1].uniform)):
        phase = "decode" if uniform else "mixed prefill-decode"
        yield from tqdm(list(group), desc=f"Capturing graphs ({phase}, {mode.name})", unit="graph")

"""Model runner: load, allocate the KV cache, capture graphs, execute one step. An orchestrator
of the parts: start-up is load_model (graph_capture.build_forward), initialize_kv_cache
(kv_cache.py), capture_model (graph_capture.capture_graphs); each stage of a step is one method,
called in this order by execute_model():
  1. dispatch: the cascade decision (a decode batch sharing a long prefix), then the runtime
     mode (FULL / PIECEWISE / NONE; never FULL for cascade), graph key, padded counts
  2. prepare_inputs: SchedulerOutput -> persistent buffers (padded) -> CommonAttentionMetadata
     (input_batch.py), planned by the attention backend's planner; the host-to-device copy of
     the inputs, except for a FULL replay, whose graph starts with that copy
  3. execute_forward: the model (or its graph replay) under a ForwardContext
  4. sample: logits of each request's last token -> logits processors and Sampler, on the
     device, outside every graph (penalties, bias, bans, the structured-output bitmask;
     step_sampler.py)
  5. start_to_host: one device-to-host copy of the sampled ids (and logprobs), issued without
     waiting (a PendingOutput, runner_output.py): launch() returns it, execute_model() waits
     for it; launch() is launch_forward() (stages 1-3) then launch_sample() (4-5)
With async scheduling (SchedulerConfig.async_scheduling) the engine core launches a step before
the previous one's tokens are back: a request's pending token is fed from the previous step's
sampled ids on the device (token_feed.py), and FULL graphs leave the input copy to the host.
With tensor parallelism every rank has a runner over its shards. Rank 0's (in the engine core)
broadcasts each step's inputs and dispatch decision (a TPStep) after step 2; the workers run
steps 2-3 from it (execute_broadcast_step) and never sample.
A step that scores prompt tokens (prompt_logprobs) needs every token's hidden state: it runs the
model without the head (never a FULL graph) and the head on those rows too (prompt_logprobs.py).
The runner holds the state the parts share (buffers, KV caches, graphs, counters); the work of
a stage belongs in its part, not here. Only start_to_host (and prompt logprobs) read the device
back.
"""

from __future__ import annotations

import functools
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

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
from vgraph.distributed.messages import TPStep, build_tp_step
from vgraph.forward_context import ForwardContext, set_forward_context
from vgraph.layers.attention import Attention
from vgraph.models.loader import load_model
from vgraph.outputs import TokenLogprobs
from vgraph.sample.sampler import SamplerOutput
from vgraph.utils import cdiv
from vgraph.worker.graph_capture import StepLogits, build_forward, capture_graphs
from vgraph.worker.input_batch import InputBuffers, StepInputs
from vgraph.worker.kv_cache import allocate_kv_cache, profile_free_bytes
from vgraph.worker.memory import DeviceMemory
from vgraph.worker.prompt_logprobs import (
    PromptSpan,
    logits_and_prompt_logprobs,
    prompt_logprob_spans,
)
from vgraph.worker.runner_output import ModelRunnerOutput, PendingOutput, start_to_host
from vgraph.worker.step_sampler import BitmaskFn, StepSampler
from vgraph.worker.token_feed import DeviceTokenFeed

logger = logging.getLogger(__name__)


@dataclass
class LaunchedForward:
    """A step whose forward is issued and whose sampling is not (launch_forward)."""

    sched: SchedulerOutput
    step: StepInputs
    logits: StepLogits  # [num_reqs_padded, vocab_size], and the greedy tokens if known
    prompt_logprobs: dict[int, list[TokenLogprobs]]


class ModelRunner:
    # whether FULL graphs record the step's input copy (one host call fewer per replayed step);
    # read once per runner (benchmarks compare both)
    full_graphs_copy_inputs = True

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
        # async scheduling: pending tokens fed on the device (a FULL graph's own input copy
        # would overwrite them, so the host copies)
        self.token_feed: DeviceTokenFeed | None = None
        if sc.async_scheduling:
            self.token_feed = DeviceTokenFeed(self.max_num_reqs, self.device)
        self.full_graphs_copy_inputs = (
            type(self).full_graphs_copy_inputs and self.token_feed is None
        )
        self.step_sampler = StepSampler(self.device)  # with what sampling keeps across steps
        self.step_sampler.token_feed = self.token_feed
        self.model: torch.nn.Module | None = None
        self.model_fn: Callable[..., torch.Tensor] | None = None  # model, maybe piecewise
        self.logits_fn: Callable[..., StepLogits] | None = None  # + LM head, maybe FULL graph
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
        self.model_fn, self.logits_fn = build_forward(
            self.model, self.config, self.cudagraph_mode, self.graph_backend
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
        """Size and allocate the paged KV cache (kv_cache.py); returns the number of usable
        blocks. On CUDA the size comes from a run of the largest step: after load_model."""
        assert self.model is not None
        cuda_budget_bytes = functools.partial(
            profile_free_bytes,
            self.model,
            self.device,
            self.max_num_tokens,
            self.max_num_reqs,
            self.memory_before_load,
            self.model_bytes,
            self.config.cache_config.gpu_memory_utilization,
        )
        mc, cc = self.config.model_config, self.config.cache_config
        self.num_blocks, caches = allocate_kv_cache(
            mc, cc, self.attention_backend, self.attn_layers, self.device, cuda_budget_bytes
        )
        self.kv_caches.update(caches)
        return self.num_blocks

    def release(self) -> None:
        """Drop the graphs, KV cache and weights; the runner can't execute afterwards."""
        self.model_fn = self.logits_fn = self.model = None
        self.kv_caches.clear()
        self.attn_layers.clear()
        gc.collect()  # graph wrappers and compiled pieces hold cycles
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- one step ---------------------------------------------------------------------------
    def execute_model(
        self, sched: SchedulerOutput, grammar_bitmask: BitmaskFn | None = None
    ) -> ModelRunnerOutput:
        """launch(), waited for."""
        return self.launch(sched, grammar_bitmask).result()

    def launch(
        self, sched: SchedulerOutput, grammar_bitmask: BitmaskFn | None = None
    ) -> PendingOutput:
        """Issue the step on the device and its tokens' copy to the host; waits for nothing the
        step computes (but for prompt logprobs). grammar_bitmask: fills the step's
        structured-output bitmask (a host tensor, or None); called once the forward is issued
        and the sampling inputs are built, so that the host fills while the device computes the
        logits."""
        return self.launch_sample(self.launch_forward(sched), grammar_bitmask)

    @torch.inference_mode()
    def launch_forward(self, sched: SchedulerOutput) -> LaunchedForward:
        """Stages 1-3 of launch(): the forward is issued, sampling is not. The engine core
        completes the previous step between the two when sampling needs its tokens."""
        for rid in sched.finished_req_ids:
            self.step_sampler.forget(rid)
        num_prefix_blocks = self.cascade_prefix_blocks(sched)
        spans = prompt_logprob_spans(sched)
        mode, key, t_pad, r_pad = self.dispatch(sched, use_cascade=num_prefix_blocks > 0)
        step, common = self.prepare_inputs(sched, t_pad, r_pad, num_prefix_blocks)
        if self.broadcast is not None:
            token_ids = step.layout.np.input_ids[: step.num_tokens]  # [num_tokens] int64
            self.broadcast(build_tp_step(token_ids, sched, step, mode, key, num_prefix_blocks))
        if spans:
            head_logits, prompt_lps = self.execute_with_prompt_logprobs(
                sched, step, common, mode, key, spans
            )
            logits = StepLogits(head_logits)
        else:
            logits, prompt_lps = self.execute_forward(step, common, mode, key), {}
        return LaunchedForward(sched, step, logits, prompt_lps)

    @torch.inference_mode()
    def launch_sample(
        self, fwd: LaunchedForward, grammar_bitmask: BitmaskFn | None = None
    ) -> PendingOutput:
        """Stages 4-5 of launch(): sampling and the copy of the tokens to the host."""
        out = self.sample(fwd.sched, fwd.step, fwd.logits, grammar_bitmask)
        if self.token_feed is not None:
            self.token_feed.remember(fwd.sched.requests, out.token_ids)
        return start_to_host(fwd.sched.requests, out, fwd.prompt_logprobs)

    def cascade_prefix_blocks(self, sched: SchedulerOutput) -> int:
        """Blocks of the prefix a uniform decode step attends as cascade (0: plain attention):
        the leading blocks all its requests share, where the cost rule says cascade pays."""
        if self.cascade_rule is None or not sched.is_uniform_decode:
            return 0
        computed = [r.num_computed_tokens for r in sched.requests]
        return self.cascade_rule.prefix_blocks(sched.block_ids, computed, self.block_size)

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
            msg.same_step_kv,
            copy=not self._graph_copies_inputs(mode),
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
        """num_reqs_padded is given for FULL replays only (the graph's request count); their
        graph copies the inputs to the device itself (but with async scheduling). With async
        scheduling, pending tokens are fed on the device, and every copy from the host's
        staging is issued before this returns."""
        full = num_reqs_padded is not None
        copy = not (full and self._graph_copies_inputs(CUDAGraphMode.FULL))
        feed = self.token_feed
        if feed is not None:
            feed.wait_for_copies()
        step = self.buffers.prepare(
            sched, num_tokens_padded, num_reqs_padded, copy=copy, pending=feed is not None
        )
        common = self.build_common_metadata(
            step,
            full_graph=full,
            num_common_prefix_blocks=num_common_prefix_blocks,
        )
        if feed is not None:
            assert step.layout is not None and copy
            feed.apply(sched.requests, step, step.layout.gpu.input_ids)
            feed.record_copies()
        return step, common

    def build_common_metadata(
        self,
        step: StepInputs,
        for_capture: bool = False,
        full_graph: bool = False,
        num_common_prefix_blocks: int = 0,
    ) -> CommonAttentionMetadata:
        """The step's attention metadata (views of the buffers), planned by the backend's
        planner if it has one (full_graph: the step replays or captures a FULL graph)."""
        common = self.buffers.attention_metadata(step, for_capture, num_common_prefix_blocks)
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
    ) -> StepLogits:
        """Returns the logits of each request's last token [num_reqs_padded, vocab_size] (float32
        or the model's dtype: the sampler widens them), and their greedy tokens where the model's
        head computes them."""
        inputs = step.layout.gpu  # views of the runner's static buffers, padded
        with set_forward_context(self._forward_context(common, mode, key, capturing, step)):
            return self.logits_fn(inputs.input_ids, inputs.positions, inputs.query_start_loc)

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
        inputs = step.layout.gpu
        with set_forward_context(self._forward_context(common, mode, key)):
            hidden = self.model_fn(inputs.input_ids, inputs.positions)
        qsl = inputs.query_start_loc  # [num_reqs_padded + 1]
        return logits_and_prompt_logprobs(hidden, qsl, self.model.compute_logits, sched, spans)

    def _graph_copies_inputs(self, mode: CUDAGraphMode) -> bool:
        return mode is CUDAGraphMode.FULL and self.full_graphs_copy_inputs

    def _forward_context(
        self,
        common: CommonAttentionMetadata,
        mode: CUDAGraphMode,
        key: BatchDescriptor | None,
        capturing: bool = False,
        step: StepInputs | None = None,
    ) -> ForwardContext:
        """step: the step run; a FULL capture records its input copy."""
        copy_inputs = None
        if capturing and step is not None and self._graph_copies_inputs(mode):
            copy_inputs = functools.partial(self.buffers.copy_to_device, step)
        return ForwardContext(
            attn_metadata=common,
            kv_caches=self.kv_caches,
            attn_layers=self.attn_layers,
            runtime_mode=mode,
            batch_descriptor=key,
            capturing=capturing,
            copy_inputs=copy_inputs,
        )

    def sample(
        self,
        sched: SchedulerOutput,
        step: StepInputs,
        logits: StepLogits,  # [num_reqs_padded, vocab_size] (+ greedy tokens)
        grammar_bitmask: BitmaskFn | None = None,
    ) -> SamplerOutput:
        """The real requests' logits -> tokens, on the device (step_sampler.py)."""
        n = step.num_reqs
        greedy = None if logits.greedy is None else logits.greedy[:n]
        return self.step_sampler(
            sched.requests, logits.logits[:n], grammar_bitmask, greedy, sched.samples
        )

    # ---- graphs -----------------------------------------------------------------------------
    @torch.inference_mode()
    def capture_model(self) -> None:
        """Capture every key of the dispatcher, FULL first, each largest first, after warm-ups
        (graph_capture.py). Runs after the KV cache exists; dummy batches write only to slot -1.
        """
        capture_graphs(
            self.dispatcher.capture_keys(),
            self._prepare_dummy,
            self.execute_forward,
            self.graph_backend,
            self.compilation_config.cudagraph_num_of_warmups,
            self.graph_stats,
            self.cudagraph_mode,
        )

    def _prepare_dummy(
        self, mode: CUDAGraphMode, key: BatchDescriptor
    ) -> tuple[StepInputs, CommonAttentionMetadata]:
        """A capture's step: the key's padded counts, every token a pad (slot -1)."""
        step = self.buffers.prepare_dummy(key.num_tokens, self.dispatcher.num_reqs_padded(key))
        full = mode is CUDAGraphMode.FULL
        return step, self.build_common_metadata(step, for_capture=full, full_graph=full)

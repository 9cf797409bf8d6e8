"""The `flashinfer` attention backend: FlashInfer's paged-KV wrappers over vgraph's own cache.

The cache is shared as is: FlashInfer's NHD paged layout is a pair of [num_blocks, block_size,
num_kv_heads, head_dim] tensors, which kv_cache[0] and kv_cache[1] already are, so no copy and no
layout of its own. FlashInfer plans each step on the host (work split, index arrays) and then
runs; FlashInferPlanner.plan() does that once per step, before the forward, for every layer:
  - uniform single-token decode: BatchDecodeWithPagedKVCacheWrapper (tensor-core kernels);
  - prefill chunks and mixed steps: BatchPrefillWithPagedKVCacheWrapper, causal (FlashInfer
    aligns the causal mask bottom-right: a query at the end of a longer context sees it all).
A cascade step (a decode batch sharing its first blocks, never in a FULL graph) runs a prefill
wrapper over the shared prefix for all queries and the decode wrapper over each request's
suffix, merged by log-sum-exp (flashinfer.cascade.merge_state).
For FULL graphs there is one decode wrapper per padded batch size, in FlashInfer's CUDA-graph form:
its index buffers have fixed addresses and plan() writes into them before each replay. The
prefill wrapper can't be captured, so the backend declares UNIFORM_SINGLE_TOKEN_DECODE: FULL
resolves to FULL_AND_PIECEWISE and mixed steps run their attention between piecewise graphs.

flashinfer is optional (`pip install 'vgraph[flashinfer]'`) and imported only when the backend is
used. It compiles its kernels on first use; warm_up() does that at start-up, cached on disk.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from vgraph.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionPlanner,
    AttentionSpec,
    CommonAttentionMetadata,
)
from vgraph.attention.torch_backend import write_kv_cache as torch_write_kv_cache

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'vgraph[flashinfer]'"
WORKSPACE_BYTES = 128 << 20  # FlashInfer's recommended float workspace (split-k partials)


def flashinfer_missing() -> str | None:
    """None when the package can be imported, else why not (with the install command)."""
    if importlib.util.find_spec("flashinfer") is None:
        return f"the flashinfer package is not installed ({INSTALL_HINT})"
    return None


def paged_kv_arrays(
    block_table: torch.Tensor,  # [>= len(seq_lens), max_blocks_per_req] int32, host
    seq_lens: np.ndarray,  # [num_reqs] int32: cached tokens of each request
    batch: int,  # >= num_reqs; requests past num_reqs are pads
    block_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's page description of a batch, as host int32 tensors: indptr [batch + 1] (each
    request's range in indices), indices (the blocks in use, request after request), last page
    lengths [batch] (1..block_size). Pads get no pages and a last page of 1, FlashInfer's rule
    for empty requests; their output rows are not read."""
    n = len(seq_lens)
    num_pages = np.zeros(batch, dtype=np.int32)
    num_pages[:n] = (seq_lens + block_size - 1) // block_size
    indptr = np.zeros(batch + 1, dtype=np.int32)
    np.cumsum(num_pages, out=indptr[1:])
    width = int(num_pages.max(initial=0))
    table = block_table.numpy()[:n, :width]
    indices = np.ascontiguousarray(table[np.arange(width)[None, :] < num_pages[:n, None]])
    last = np.ones(batch, dtype=np.int32)
    last[:n] = seq_lens - (num_pages[:n] - 1) * block_size
    return torch.from_numpy(indptr), torch.from_numpy(indices), torch.from_numpy(last)


@dataclass
class FlashInferPlan:
    """What the layers of one step run: a planned wrapper and the query rows it covers; for a
    cascade step also the shared-prefix wrapper, whose partial result is merged with the
    wrapper's (over each request's own suffix) by log-sum-exp."""

    wrapper: Any  # a planned BatchDecode... or BatchPrefillWithPagedKVCacheWrapper
    num_rows: int  # query rows the wrapper reads; rows past it are pads
    prefix: Any = None  # cascade: the prefill wrapper planned over the shared prefix


class FlashInferAttentionImpl(AttentionImpl):
    _use_csrc_write: bool | None = None

    def write_kv_cache(
        self,
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
        metadata: CommonAttentionMetadata,
    ) -> None:
        """vgraph's own cache write (one fused kernel when vgraph._C is built, else torch)."""
        if self._use_csrc_write is None:
            from vgraph._ext import use_cuda_op

            self._use_csrc_write = use_cuda_op(key, "reshape_and_cache")
        if self._use_csrc_write:
            key_cache, value_cache = self.key_value_caches(kv_cache)
            torch.ops.vgraph_C.reshape_and_cache.default(
                key, value, key_cache, value_cache, metadata.slot_mapping
            )
        else:
            torch_write_kv_cache(key, value, kv_cache, metadata.slot_mapping[: key.shape[0]])

    def forward(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
        metadata: CommonAttentionMetadata,
        output: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    ) -> None:
        plan: FlashInferPlan = metadata.backend_plan
        n, caches = plan.num_rows, self.key_value_caches(kv_cache)
        if plan.prefix is None:
            plan.wrapper.run(query[:n], caches, out=output[:n])
        else:  # cascade: the shared prefix once for every query, then each request's suffix
            from flashinfer.cascade import merge_state

            prefix_out, prefix_lse = plan.prefix.run(query[:n], caches, return_lse=True)
            suffix_out, suffix_lse = plan.wrapper.run(query[:n], caches, return_lse=True)
            output[:n] = merge_state(prefix_out, prefix_lse, suffix_out, suffix_lse)[0]
        if n < output.shape[0]:
            output[n:].zero_()


class FlashInferPlanner(AttentionPlanner):
    """Plans each step's FlashInfer wrapper on the host, before the forward (never inside a
    graph). One eager decode wrapper, one prefill wrapper, and one CUDA-graph decode wrapper per
    padded batch size of the FULL graphs, created when that size is first captured."""

    def __init__(self, spec: AttentionSpec) -> None:
        import flashinfer

        self.fi = flashinfer
        self.spec = spec
        self.device = spec.device
        # one float workspace for every wrapper: a step runs one wrapper at a time
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=self.device)
        self.decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_tensor_cores=True
        )
        self.prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD")
        # cascade steps: the shared prefix as one non-causal "request" holding every query
        self.prefix = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD")
        self.graph_decode: dict[int, Any] = {}  # padded batch size -> CUDA-graph wrapper
        self.max_blocks = spec.max_num_reqs * spec.max_blocks_per_req

    # ---- per step ---------------------------------------------------------------------------
    def plan(self, common: CommonAttentionMetadata, full_graph: bool) -> None:
        num_reqs = common.num_reqs
        seq_lens = common.seq_lens_cpu.numpy()[:num_reqs]
        uniform_decode = common.num_actual_tokens == num_reqs and common.max_query_len == 1
        if full_graph:
            if not uniform_decode:
                raise ValueError(
                    "the flashinfer backend captures only uniform single-token decode steps "
                    "in FULL graphs (support UNIFORM_SINGLE_TOKEN_DECODE)"
                )
            batch = common.seq_lens.shape[0]  # padded request count of the graph
            wrapper = self.graph_decode.get(batch) or self._graph_wrapper(batch)
            self._plan_decode(wrapper, common.block_table_cpu, seq_lens, batch)
            common.backend_plan = FlashInferPlan(wrapper, batch)
        elif common.num_common_prefix_blocks:
            common.backend_plan = self._plan_cascade(common, seq_lens)
        elif uniform_decode:
            self._plan_decode(self.decode, common.block_table_cpu, seq_lens, num_reqs)
            common.backend_plan = FlashInferPlan(self.decode, num_reqs)
        else:
            self._plan_prefill(common, seq_lens)
            common.backend_plan = FlashInferPlan(self.prefill, common.num_actual_tokens)

    def _plan_decode(
        self, wrapper: Any, block_table: torch.Tensor, seq_lens: np.ndarray, batch: int
    ) -> None:
        s = self.spec
        indptr, indices, last = paged_kv_arrays(block_table, seq_lens, batch, s.block_size)
        wrapper.plan(
            indptr,
            indices,
            last,
            s.num_heads,
            s.num_kv_heads,
            s.head_dim,
            s.block_size,
            sm_scale=s.scale,
            q_data_type=s.dtype,
            kv_data_type=s.dtype,
        )

    def _plan_prefill(self, common: CommonAttentionMetadata, seq_lens: np.ndarray) -> None:
        s = self.spec
        indptr, indices, last = paged_kv_arrays(
            common.block_table_cpu, seq_lens, len(seq_lens), s.block_size
        )
        qo_indptr = common.query_start_loc_cpu[: common.num_reqs + 1]
        self._plan_paged_prefill(self.prefill, qo_indptr, indptr, indices, last, causal=True)

    def _plan_paged_prefill(
        self,
        wrapper: Any,
        qo_indptr: torch.Tensor,  # [batch + 1] int32, host
        indptr: torch.Tensor,  # [batch + 1] int32, host
        indices: torch.Tensor,  # [pages] int32, host
        last: torch.Tensor,  # [batch] int32, host
        causal: bool,
    ) -> None:
        s = self.spec
        wrapper.plan(
            qo_indptr,
            indptr,
            indices,
            last,
            s.num_heads,
            s.num_kv_heads,
            s.head_dim,
            s.block_size,
            causal=causal,
            sm_scale=s.scale,
            q_data_type=s.dtype,
            kv_data_type=s.dtype,
        )

    def _plan_cascade(
        self, common: CommonAttentionMetadata, seq_lens: np.ndarray
    ) -> FlashInferPlan:
        """A uniform decode step whose requests share their first P blocks (all computed): the
        prefix wrapper attends every query over those blocks, non-causally (each query sits
        after the whole prefix); the decode wrapper attends each over the rest of its blocks
        (at least its own new token)."""
        s, n = self.spec, common.num_reqs
        p = common.num_common_prefix_blocks
        shared = common.block_table_cpu[0, :p].contiguous()
        self._plan_paged_prefill(
            self.prefix,
            torch.tensor([0, n], dtype=torch.int32),
            torch.tensor([0, p], dtype=torch.int32),
            shared,
            torch.tensor([s.block_size], dtype=torch.int32),
            causal=False,
        )
        suffix_lens = seq_lens - p * s.block_size
        self._plan_decode(self.decode, common.block_table_cpu[:, p:], suffix_lens, n)
        return FlashInferPlan(self.decode, n, prefix=self.prefix)

    def _graph_wrapper(self, batch: int) -> Any:
        wrapper = self.fi.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace,
            "NHD",
            use_cuda_graph=True,
            use_tensor_cores=True,
            paged_kv_indptr_buffer=torch.zeros(batch + 1, dtype=torch.int32, device=self.device),
            paged_kv_indices_buffer=torch.zeros(
                self.max_blocks, dtype=torch.int32, device=self.device
            ),
            paged_kv_last_page_len_buffer=torch.ones(batch, dtype=torch.int32, device=self.device),
        )
        self.graph_decode[batch] = wrapper
        return wrapper

    # ---- start-up ---------------------------------------------------------------------------
    def warm_up(self) -> None:
        """Build (JIT-compile, or load from FlashInfer's disk cache) the decode and prefill
        kernels now, at start-up, rather than inside the first request that needs them."""
        from flashinfer.jit import env as fi_env

        s = self.spec
        logger.info(
            "FlashInfer %s: loading its decode and prefill kernels for head_dim=%d %s "
            "(compiled on first use, then cached in %s)",
            self.fi.__version__,
            s.head_dim,
            str(s.dtype).removeprefix("torch."),
            fi_env.FLASHINFER_JIT_DIR,
        )
        kv = torch.zeros((2, 2, s.block_size, s.num_kv_heads, s.head_dim), dtype=s.dtype)
        kv = kv.to(self.device)
        caches = (kv[0], kv[1])
        table = torch.zeros((2, 2), dtype=torch.int32)
        kinds = ("decode", "prefill") + (("cascade",) if s.cascade else ())
        for kind in tqdm(kinds, desc="FlashInfer kernels", unit="kernel"):
            t0 = time.perf_counter()
            q_len = 2 if kind == "prefill" else 1
            q = torch.zeros((2 * q_len, s.num_heads, s.head_dim), dtype=s.dtype, device=self.device)
            lens = np.full(2, 2, dtype=np.int32)
            if kind == "decode":
                self._plan_decode(self.decode, table, lens, 2)
                self.decode.run(q, caches)
            elif kind == "cascade":  # the non-causal prefix pass and the merge
                common = _warm_up_metadata(table, lens + s.block_size, q_len, prefix_blocks=1)
                self.plan(common, full_graph=False)
                out = torch.empty_like(q)
                FlashInferAttentionImpl(s.num_heads, s.num_kv_heads, s.head_dim, s.scale).forward(
                    q, kv, common, out
                )
            else:
                common = _warm_up_metadata(table, lens, q_len)
                self._plan_prefill(common, lens)
                self.prefill.run(q, caches)
            torch.cuda.synchronize(self.device)
            logger.info("FlashInfer %s kernels ready in %.1f s", kind, time.perf_counter() - t0)


def _warm_up_metadata(
    table: torch.Tensor, seq_lens: np.ndarray, q_len: int, prefix_blocks: int = 0
) -> CommonAttentionMetadata:
    n = len(seq_lens)
    qsl = torch.arange(0, (n + 1) * q_len, q_len, dtype=torch.int32)
    lens = torch.from_numpy(seq_lens)
    return CommonAttentionMetadata(
        query_start_loc=qsl,
        seq_lens=lens,
        block_table=table,
        slot_mapping=torch.full((n * q_len,), -1, dtype=torch.int64),
        query_start_loc_cpu=qsl,
        seq_lens_cpu=lens,
        block_table_cpu=table,
        num_reqs=n,
        num_actual_tokens=n * q_len,
        max_query_len=q_len,
        max_seq_len=int(seq_lens.max()),
        num_common_prefix_blocks=prefix_blocks,
    )


class FlashInferAttentionBackend(AttentionBackend):
    name = "flashinfer"
    cudagraph_support = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    impl_cls = FlashInferAttentionImpl

    head_dims = (64, 128, 256)

    @classmethod
    def is_available(cls, device: torch.device, head_dim: int | None = None) -> str | None:
        missing = flashinfer_missing()
        if missing is not None:
            return missing
        if device.type != "cuda":
            return "FlashInfer runs on CUDA devices only"
        if head_dim is not None and head_dim not in cls.head_dims:
            return f"its kernels are built for head_dim {cls.head_dims}, not {head_dim}"
        return None

    @classmethod
    def make_planner(cls, spec: AttentionSpec) -> FlashInferPlanner:
        return FlashInferPlanner(spec)

    @classmethod
    def supports_cascade(cls, device: torch.device) -> bool:
        return device.type == "cuda"

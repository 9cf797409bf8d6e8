"""Persistent input buffers of the model runner, and the per-step fill from a SchedulerOutput.

A step's inputs (token ids, positions, cache slots, then the per-request ranges, lengths and
block table) live in one byte buffer on the device, staged through a pinned host twin with numpy
views, and travel in ONE non-blocking host-to-device copy of the prefix the step uses: on an
H200 host every extra copy is some 10 us of Python and driver time on the critical path of a
step. A FULL graph records that copy as its first node (prepare(copy=False) leaves it out): the
host fills the staging twin and launches the graph. The layout depends only on the padded
counts (tokens first, then requests), so a captured graph, which reads fixed addresses, finds
its inputs where it was captured: a FULL graph's key fixes both counts, a piecewise graph's key
the token count (its pieces read only token inputs).
Pad tokens get input id 0, position 0 and slot -1; pad requests get seq_len 0 and an empty
query range. A step's CommonAttentionMetadata is views of these buffers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from vgraph.attention.backend import CommonAttentionMetadata
from vgraph.core.scheduler import SchedulerOutput

_ALIGN = 16  # bytes: every region starts aligned for vector loads


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class InputViews(NamedTuple):
    """One side's views of a step layout (torch tensors, or numpy arrays of the host side)."""

    input_ids: torch.Tensor | np.ndarray  # [T] int64
    positions: torch.Tensor | np.ndarray  # [T] int64
    slot_mapping: torch.Tensor | np.ndarray  # [T] int64
    query_start_loc: torch.Tensor | np.ndarray  # [R + 1] int32
    seq_lens: torch.Tensor | np.ndarray  # [R] int32
    block_table: torch.Tensor | np.ndarray  # [R, max_blocks_per_req] int32


@dataclass(frozen=True)
class StepLayout:
    """Where the inputs of a step with T padded tokens and R padded requests sit."""

    gpu: InputViews  # what the model and its graphs read
    cpu: InputViews  # the pinned staging twins (torch), for backends' host-side planning
    np: InputViews  # numpy views of cpu, which the fill writes
    nbytes: int  # the prefix of the buffers the step uses: one copy


@dataclass
class StepInputs:
    num_reqs: int
    num_tokens: int  # real tokens
    num_reqs_padded: int
    num_tokens_padded: int
    max_query_len: int
    max_seq_len: int
    uniform_decode: bool
    layout: StepLayout | None = None  # None only for steps built by hand in tests
    same_step_kv: bool = False  # SchedulerOutput.same_step_kv


class InputBuffers:
    def __init__(
        self,
        max_num_tokens: int,
        max_num_reqs: int,
        max_blocks_per_req: int,
        block_size: int,
        device: torch.device,
    ) -> None:
        self.max_num_tokens = max_num_tokens
        self.max_num_reqs = max_num_reqs
        self.max_blocks_per_req = max_blocks_per_req
        self.block_size = block_size
        nbytes = self._offsets(max_num_tokens, max_num_reqs)[-1]
        self.host = torch.zeros(nbytes, dtype=torch.uint8, pin_memory=device.type == "cuda")
        self.device = torch.zeros(nbytes, dtype=torch.uint8, device=device)

    def _offsets(self, t: int, r: int) -> tuple[int, ...]:
        """Byte offsets of ids, positions, slots, query_start_loc, seq_lens, block_table, end."""
        ids, pos, slots = 0, _align(8 * t), 2 * _align(8 * t)
        qsl = 3 * _align(8 * t)
        lens = qsl + _align(4 * (r + 1))
        table = lens + _align(4 * r)
        return ids, pos, slots, qsl, lens, table, table + 4 * r * self.max_blocks_per_req

    @functools.lru_cache(maxsize=1024)  # noqa: B019 (one InputBuffers per runner, for its life)
    def layout(self, t: int, r: int) -> StepLayout:
        """The views of a step with t padded tokens and r padded requests."""
        assert 1 <= t <= self.max_num_tokens and 0 <= r <= self.max_num_reqs, (t, r)
        ids, pos, slots, qsl, lens, table, end = self._offsets(t, r)
        spans = [(ids, t), (pos, t), (slots, t), (qsl, r + 1), (lens, r), (table, None)]

        def views(buf: torch.Tensor) -> InputViews:
            out = []
            for (start, n), dtype in zip(spans, [torch.int64] * 3 + [torch.int32] * 3):
                if n is None:  # the block table
                    v = buf[start:end].view(torch.int32).view(r, self.max_blocks_per_req)
                else:
                    v = buf[start : start + n * (8 if dtype is torch.int64 else 4)].view(dtype)
                out.append(v)
            return InputViews(*out)

        cpu = views(self.host)
        return StepLayout(views(self.device), cpu, InputViews(*(v.numpy() for v in cpu)), end)

    def prepare(
        self,
        sched: SchedulerOutput,
        num_tokens_padded: int | None = None,
        num_reqs_padded: int | None = None,
        copy: bool = True,
        pending: bool = False,
    ) -> StepInputs:
        """Fill the buffers for one step (padded up to the given sizes) and copy them over
        (copy=False: the caller's FULL graph does, copy_to_device being its first node).
        pending: some request's next token is not on the host yet (async scheduling): its id
        is written 0, for the token feed to overwrite on the device (token_feed.py)."""
        if sched.requests and max(sched.num_scheduled_tokens) == 1:
            step = self._fill_decode(sched, num_tokens_padded, num_reqs_padded, pending)
        else:
            step = self._fill_any(sched, num_tokens_padded, num_reqs_padded)
        if copy:
            self.copy_to_device(step)
        return step

    def _fill_any(
        self,
        sched: SchedulerOutput,
        num_tokens_padded: int | None,
        num_reqs_padded: int | None,
    ) -> StepInputs:
        """prepare() of any step: token ids here, the rest in _fill."""
        num_reqs = len(sched.requests)
        nst = np.asarray(sched.num_scheduled_tokens, dtype=np.int64)  # [R]
        computed = np.fromiter(
            (r.num_computed_tokens for r in sched.requests), dtype=np.int64, count=num_reqs
        )
        layout = self.layout(num_tokens_padded or int(nst.sum()), num_reqs_padded or num_reqs)
        # 1. token ids of each request's next num_scheduled tokens
        tokens = layout.np.input_ids
        off = 0
        for req, c, n in zip(sched.requests, computed.tolist(), nst.tolist()):
            known = req.all_token_ids[c : c + n]  # short by a pending token (async scheduling)
            tokens[off : off + len(known)] = known
            if len(known) < n:
                tokens[off + len(known) : off + n] = 0
            off += n
        return self._fill(layout, nst, computed, sched.block_ids, sched.same_step_kv)

    def _fill_decode(
        self,
        sched: SchedulerOutput,
        num_tokens_padded: int | None,
        num_reqs_padded: int | None,
        pending: bool = False,
    ) -> StepInputs:
        """prepare() of a step where every request computes one token: the same buffer contents as
        _fill, from Python lists (a numpy call costs microseconds, and a decode step of a few
        requests is on the critical path of every generated token)."""
        reqs, bs = sched.requests, self.block_size
        num_reqs = len(reqs)
        layout = self.layout(num_tokens_padded or num_reqs, num_reqs_padded or num_reqs)
        v = layout.np
        computed = [r.num_computed_tokens for r in reqs]  # = each token's position
        if pending:  # a token not on the host yet is written 0 (prepare)
            v.input_ids[:num_reqs] = [
                r.all_token_ids[c] if c < r.num_tokens else 0 for r, c in zip(reqs, computed)
            ]
        else:
            v.input_ids[:num_reqs] = [r.all_token_ids[c] for r, c in zip(reqs, computed)]
        v.positions[:num_reqs] = computed
        v.slot_mapping[:num_reqs] = [
            blocks[c // bs] * bs + c % bs for blocks, c in zip(sched.block_ids, computed)
        ]
        bt = v.block_table
        bt[:] = 0
        for i, blocks in enumerate(sched.block_ids):
            bt[i, : len(blocks)] = blocks
        v.query_start_loc[: num_reqs + 1] = range(num_reqs + 1)
        seq_lens = [c + 1 for c in computed]
        v.seq_lens[:num_reqs] = seq_lens
        return self._pad(
            layout, num_reqs, num_reqs, 1, max(seq_lens), not sched.same_step_kv, sched.same_step_kv
        )

    def prepare_broadcast(
        self,
        token_ids: bytes,  # int64 [num_tokens]
        num_computed: list[int],  # [R]
        num_scheduled: list[int],  # [R]
        block_ids: list[list[int]],
        num_tokens_padded: int | None,
        num_reqs_padded: int | None,
        same_step_kv: bool = False,
        copy: bool = True,
    ) -> StepInputs:
        """prepare() on a tensor-parallel worker: the step as rank 0 sent it (no Request)."""
        ids = np.frombuffer(token_ids, dtype=np.int64)
        layout = self.layout(num_tokens_padded or len(ids), num_reqs_padded or len(num_scheduled))
        layout.np.input_ids[: len(ids)] = ids
        nst = np.asarray(num_scheduled, dtype=np.int64)
        computed = np.asarray(num_computed, dtype=np.int64)
        step = self._fill(layout, nst, computed, block_ids, same_step_kv)
        if copy:
            self.copy_to_device(step)
        return step

    def _fill(
        self,
        layout: StepLayout,
        nst: np.ndarray,  # [R] scheduled tokens per request
        computed: np.ndarray,  # [R] tokens computed before this step
        block_ids: list[list[int]],
        same_step_kv: bool,
    ) -> StepInputs:
        """Everything but the token ids (already in place): positions, slots, ranges, padding."""
        num_reqs = len(nst)
        num_tokens = int(nst.sum())
        v = layout.np
        t_pad, r_pad = len(v.input_ids), len(v.seq_lens)
        assert num_tokens <= t_pad and num_reqs <= r_pad, (num_tokens, t_pad, num_reqs, r_pad)
        # 1. positions of each request's next num_scheduled tokens
        req_idx = np.repeat(np.arange(num_reqs), nst)  # [T] request of each token
        cu = np.cumsum(nst)
        pos = np.arange(num_tokens) - np.repeat(cu - nst, nst) + computed[req_idx]
        v.positions[:num_tokens] = pos

        # 2. block tables (whole rows) and each token's cache slot
        bt = v.block_table
        bt[:] = 0
        for i, blocks in enumerate(block_ids):
            bt[i, : len(blocks)] = blocks
        bs = self.block_size
        v.slot_mapping[:num_tokens] = bt[req_idx, pos // bs].astype(np.int64) * bs + pos % bs

        # 3. per-request ranges and lengths
        qsl = v.query_start_loc
        qsl[0] = 0
        qsl[1 : num_reqs + 1] = cu
        seq_lens = computed + nst
        v.seq_lens[:num_reqs] = seq_lens
        uniform = bool((nst == 1).all()) and not same_step_kv
        return self._pad(
            layout,
            num_tokens,
            num_reqs,
            int(nst.max()),
            int(seq_lens.max()),
            uniform,
            same_step_kv,
        )

    def _pad(
        self,
        layout: StepLayout,
        num_tokens: int,
        num_reqs: int,
        max_query_len: int,
        max_seq_len: int,
        uniform_decode: bool,
        same_step_kv: bool,
    ) -> StepInputs:
        """4. padding (pad tokens: id 0, position 0, slot -1; pad requests: an empty range at the
        end, seq_len 0)."""
        v = layout.np
        v.query_start_loc[num_reqs + 1 :] = num_tokens
        v.seq_lens[num_reqs:] = 0
        v.input_ids[num_tokens:] = 0
        v.positions[num_tokens:] = 0
        v.slot_mapping[num_tokens:] = -1
        return StepInputs(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            num_reqs_padded=len(v.seq_lens),
            num_tokens_padded=len(v.input_ids),
            max_query_len=max_query_len,
            max_seq_len=max_seq_len,
            uniform_decode=uniform_decode,
            layout=layout,
            same_step_kv=same_step_kv,
        )

    def prepare_dummy(self, num_tokens: int, num_reqs: int) -> StepInputs:
        """A batch for warm-up and capture: num_tokens split over num_reqs requests, every KV
        write to slot -1, so no real cache block is touched."""
        assert 1 <= num_reqs <= num_tokens
        q_lens = np.full(num_reqs, num_tokens // num_reqs, dtype=np.int64)
        q_lens[: num_tokens % num_reqs] += 1
        layout = self.layout(num_tokens, num_reqs)
        v = layout.np
        v.input_ids[:] = 0
        v.positions[:] = 0
        v.slot_mapping[:] = -1
        v.query_start_loc[0] = 0
        v.query_start_loc[1:] = np.cumsum(q_lens)
        v.seq_lens[:] = q_lens
        v.block_table[:] = 0
        step = StepInputs(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            max_query_len=int(q_lens.max()),
            max_seq_len=int(q_lens.max()),
            uniform_decode=num_reqs == num_tokens,
            layout=layout,
        )
        self.copy_to_device(step)
        return step

    def attention_metadata(
        self, step: StepInputs, for_capture: bool = False, num_common_prefix_blocks: int = 0
    ) -> CommonAttentionMetadata:
        """The step's attention metadata over these buffers: padded views on the device (what a
        graph reads), the real rows on the host (what a backend's planner reads)."""
        assert step.layout is not None
        gpu, cpu = step.layout.gpu, step.layout.cpu
        return CommonAttentionMetadata(
            query_start_loc=gpu.query_start_loc,
            seq_lens=gpu.seq_lens,
            block_table=gpu.block_table,
            slot_mapping=gpu.slot_mapping,
            query_start_loc_cpu=cpu.query_start_loc[: step.num_reqs + 1],
            seq_lens_cpu=cpu.seq_lens[: step.num_reqs],
            block_table_cpu=cpu.block_table,
            num_reqs=step.num_reqs,
            num_actual_tokens=step.num_tokens,
            max_query_len=step.max_query_len,
            max_seq_len=step.max_seq_len,
            for_capture=for_capture,
            num_common_prefix_blocks=num_common_prefix_blocks,
            same_step_kv=step.same_step_kv,
        )

    def copy_to_device(self, step: StepInputs) -> None:
        """The step's one host-to-device copy, non-blocking: the prefix its layout uses (a fixed
        size per padded shape, so a graph can record it)."""
        assert step.layout is not None
        n = step.layout.nbytes
        self.device[:n].copy_(self.host[:n], non_blocking=True)

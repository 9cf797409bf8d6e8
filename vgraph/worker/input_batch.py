"""Persistent input buffers of the model runner, and the per-step fill from a SchedulerOutput.

Every step writes its inputs into the same device tensors (a captured graph reads fixed
addresses), staged through host tensors (pinned on CUDA) with numpy views, and copies them in one
non-blocking batch. Pad tokens get input id 0, position 0 and slot -1; pad requests get seq_len 0
and an empty query range. A step's CommonAttentionMetadata is views of these buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vgraph.attention.backend import CommonAttentionMetadata
from vgraph.core.scheduler import SchedulerOutput


@dataclass
class StepInputs:
    num_reqs: int
    num_tokens: int  # real tokens
    num_reqs_padded: int
    num_tokens_padded: int
    max_query_len: int
    max_seq_len: int
    uniform_decode: bool


class _Buffer:
    """A device tensor with a host staging twin and a numpy view of the twin."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
        pin = device.type == "cuda"
        self.cpu = torch.zeros(shape, dtype=dtype, pin_memory=pin)
        self.np = self.cpu.numpy()
        self.gpu = torch.zeros(shape, dtype=dtype, device=device)

    def copy_to_device(self, n: int) -> None:
        self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)


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
        self.block_size = block_size
        self.input_ids = _Buffer((max_num_tokens,), torch.int64, device)  # [T]
        self.positions = _Buffer((max_num_tokens,), torch.int64, device)  # [T]
        self.slot_mapping = _Buffer((max_num_tokens,), torch.int64, device)  # [T]
        self.query_start_loc = _Buffer((max_num_reqs + 1,), torch.int32, device)  # [R + 1]
        self.seq_lens = _Buffer((max_num_reqs,), torch.int32, device)  # [R]
        self.block_table = _Buffer((max_num_reqs, max_blocks_per_req), torch.int32, device)

    def prepare(
        self,
        sched: SchedulerOutput,
        num_tokens_padded: int | None = None,
        num_reqs_padded: int | None = None,
    ) -> StepInputs:
        """Fill the buffers for one step (padded up to the given sizes) and copy them over."""
        num_reqs = len(sched.requests)
        nst = np.asarray(sched.num_scheduled_tokens, dtype=np.int64)  # [R]
        computed = np.fromiter(
            (r.num_computed_tokens for r in sched.requests), dtype=np.int64, count=num_reqs
        )
        # 1. token ids of each request's next num_scheduled tokens
        tokens = self.input_ids.np
        off = 0
        for req, c, n in zip(sched.requests, computed.tolist(), nst.tolist()):
            tokens[off : off + n] = req.all_token_ids[c : c + n]
            off += n
        return self._fill(nst, computed, sched.block_ids, num_tokens_padded, num_reqs_padded)

    def prepare_broadcast(
        self,
        token_ids: bytes,  # int64 [num_tokens]
        num_computed: list[int],  # [R]
        num_scheduled: list[int],  # [R]
        block_ids: list[list[int]],
        num_tokens_padded: int | None,
        num_reqs_padded: int | None,
    ) -> StepInputs:
        """prepare() on a tensor-parallel worker: the step as rank 0 sent it (no Request)."""
        ids = np.frombuffer(token_ids, dtype=np.int64)
        self.input_ids.np[: len(ids)] = ids
        nst = np.asarray(num_scheduled, dtype=np.int64)
        computed = np.asarray(num_computed, dtype=np.int64)
        return self._fill(nst, computed, block_ids, num_tokens_padded, num_reqs_padded)

    def _fill(
        self,
        nst: np.ndarray,  # [R] scheduled tokens per request
        computed: np.ndarray,  # [R] tokens computed before this step
        block_ids: list[list[int]],
        num_tokens_padded: int | None,
        num_reqs_padded: int | None,
    ) -> StepInputs:
        """Everything but the token ids (already in place): positions, slots, ranges, padding."""
        num_reqs = len(nst)
        num_tokens = int(nst.sum())
        t_pad = num_tokens_padded or num_tokens
        r_pad = num_reqs_padded or num_reqs
        assert t_pad <= self.max_num_tokens and r_pad <= self.max_num_reqs, (t_pad, r_pad)
        tokens = self.input_ids.np
        # 1. positions of each request's next num_scheduled tokens
        req_idx = np.repeat(np.arange(num_reqs), nst)  # [T] request of each token
        cu = np.cumsum(nst)
        pos = np.arange(num_tokens) - np.repeat(cu - nst, nst) + computed[req_idx]
        self.positions.np[:num_tokens] = pos

        # 2. block tables (whole rows) and each token's cache slot
        bt = self.block_table.np
        bt[:r_pad] = 0
        for i, blocks in enumerate(block_ids):
            bt[i, : len(blocks)] = blocks
        bs = self.block_size
        self.slot_mapping.np[:num_tokens] = bt[req_idx, pos // bs].astype(np.int64) * bs + pos % bs

        # 3. per-request ranges and lengths
        qsl = self.query_start_loc.np
        qsl[0] = 0
        qsl[1 : num_reqs + 1] = cu
        qsl[num_reqs + 1 : r_pad + 1] = num_tokens
        seq_lens = computed + nst
        self.seq_lens.np[:num_reqs] = seq_lens
        self.seq_lens.np[num_reqs:r_pad] = 0

        # 4. padding
        tokens[num_tokens:t_pad] = 0
        self.positions.np[num_tokens:t_pad] = 0
        self.slot_mapping.np[num_tokens:t_pad] = -1

        self._copy_to_device(t_pad, r_pad)
        return StepInputs(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            num_reqs_padded=r_pad,
            num_tokens_padded=t_pad,
            max_query_len=int(nst.max()),
            max_seq_len=int(seq_lens.max()),
            uniform_decode=bool((nst == 1).all()),
        )

    def prepare_dummy(self, num_tokens: int, num_reqs: int) -> StepInputs:
        """A batch for warm-up and capture: num_tokens split over num_reqs requests, every KV
        write to slot -1, so no real cache block is touched."""
        assert 1 <= num_reqs <= num_tokens
        q_lens = np.full(num_reqs, num_tokens // num_reqs, dtype=np.int64)
        q_lens[: num_tokens % num_reqs] += 1
        self.input_ids.np[:num_tokens] = 0
        self.positions.np[:num_tokens] = 0
        self.slot_mapping.np[:num_tokens] = -1
        self.query_start_loc.np[0] = 0
        self.query_start_loc.np[1 : num_reqs + 1] = np.cumsum(q_lens)
        self.seq_lens.np[:num_reqs] = q_lens
        self.block_table.np[:num_reqs] = 0
        self._copy_to_device(num_tokens, num_reqs)
        return StepInputs(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            max_query_len=int(q_lens.max()),
            max_seq_len=int(q_lens.max()),
            uniform_decode=num_reqs == num_tokens,
        )

    def attention_metadata(
        self, step: StepInputs, for_capture: bool = False, num_common_prefix_blocks: int = 0
    ) -> CommonAttentionMetadata:
        """The step's attention metadata over these buffers: padded views on the device (what a
        graph reads), the real rows on the host (what a backend's planner reads)."""
        return CommonAttentionMetadata(
            query_start_loc=self.query_start_loc.gpu[: step.num_reqs_padded + 1],
            seq_lens=self.seq_lens.gpu[: step.num_reqs_padded],
            block_table=self.block_table.gpu,
            slot_mapping=self.slot_mapping.gpu[: step.num_tokens_padded],
            query_start_loc_cpu=self.query_start_loc.cpu[: step.num_reqs + 1],
            seq_lens_cpu=self.seq_lens.cpu[: step.num_reqs],
            block_table_cpu=self.block_table.cpu,
            num_reqs=step.num_reqs,
            num_actual_tokens=step.num_tokens,
            max_query_len=step.max_query_len,
            max_seq_len=step.max_seq_len,
            for_capture=for_capture,
            num_common_prefix_blocks=num_common_prefix_blocks,
        )

    def _copy_to_device(self, num_tokens: int, num_reqs: int) -> None:
        """The step's host-to-device copies, non-blocking, only the rows in use."""
        for buf in (self.input_ids, self.positions, self.slot_mapping):
            buf.copy_to_device(num_tokens)
        self.query_start_loc.copy_to_device(num_reqs + 1)
        self.seq_lens.copy_to_device(num_reqs)
        self.block_table.copy_to_device(num_reqs)

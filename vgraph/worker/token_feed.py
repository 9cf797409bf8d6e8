"""Async scheduling's device-side token feed: a decode launched before the previous step's
tokens are back reads its input token from that step's sampled ids, on the device.

The runner keeps the last launched step's sampled ids (`remember`: the sampler's output tensor
itself, no copy) with each request's row. A step whose request has a pending token
(Request.num_pending_tokens: the host has not seen it) gets a placeholder id from the host fill
and, once its inputs are on the device, `apply` writes the sampled id over it, on the stream, so
it follows the previous step's sampler and precedes this step's forward: in the steady state of
decoding (request i of this step was row i of the last one, for every request) one
device-to-device copy of the first rows; else one small host-to-device copy of (token index,
row) pairs and one indexed copy. A step with pending
tokens never runs a FULL graph that records its own input copy (the graph's copy would overwrite
the fed ids): with async scheduling the runner captures FULL graphs without it.

The host reuses its pinned staging (the input buffers' twin, the planner's, this feed's pairs)
every step. Steps overlap, so before filling a step's inputs the host waits for the previous
step's host-to-device copies to have run (`wait_for_copies`; they follow the step before it on
the stream, so by then they have nearly always run).
"""

from __future__ import annotations

import torch

from vgraph.request import Request
from vgraph.worker.input_batch import StepInputs


class DeviceTokenFeed:
    def __init__(self, max_num_reqs: int, device: torch.device) -> None:
        self.device = device
        self.sampled = torch.zeros(0, dtype=torch.int64, device=device)  # the last step's [R]
        self.rows: dict[str, int] = {}  # request id -> its row of `sampled`
        self.pairs_host = torch.zeros(
            (2, max_num_reqs), dtype=torch.int64, pin_memory=device.type == "cuda"
        )
        self.pairs = torch.zeros((2, max_num_reqs), dtype=torch.int64, device=device)
        self.copied = torch.cuda.Event() if device.type == "cuda" else None
        self.copied_recorded = False

    def wait_for_copies(self) -> None:
        """The previous step's host-to-device copies have run: its pinned staging is free."""
        if self.copied is not None and self.copied_recorded:
            self.copied.synchronize()

    def record_copies(self) -> None:
        """This step's host-to-device copies are all issued (call before its forward)."""
        if self.copied is not None:
            self.copied.record()
            self.copied_recorded = True

    def apply(self, requests: list[Request], step: StepInputs, input_ids: torch.Tensor) -> None:
        """Write the pending token of each request that has one over its placeholder in the
        step's device input ids (its only token this step: the last of its query range)."""
        assert step.layout is not None
        rows = self.rows
        if step.max_query_len == 1:  # a token a request: request i's is token i
            pairs = [
                (i, rows[req.request_id])
                for i, req in enumerate(requests)
                if req.num_pending_tokens  # its next token is not on the host yet
            ]
        else:
            qsl = step.layout.np.query_start_loc
            pairs = [
                (int(qsl[i + 1]) - 1, rows[req.request_id])
                for i, req in enumerate(requests)
                if req.num_pending_tokens
            ]
        if not pairs:
            return
        k = len(pairs)
        if pairs[-1] == (k - 1, k - 1) and all(d == i and r == i for i, (d, r) in enumerate(pairs)):
            input_ids[:k].copy_(self.sampled[:k])  # token i is the last step's row i
            return
        self.pairs_host.numpy()[:, :k] = list(zip(*pairs))
        dev = self.pairs[:, :k]
        dev.copy_(self.pairs_host[:, :k], non_blocking=True)
        input_ids.index_copy_(0, dev[0], self.sampled.index_select(0, dev[1]))

    def remember(self, requests: list[Request], token_ids: torch.Tensor) -> None:
        """The step's sampled ids [R] (on the device): the next step's pending tokens. Kept by
        reference: nothing writes the sampler's output after it, and the caching allocator
        keeps its memory while it is held."""
        self.sampled = token_ids
        self.rows = {req.request_id: i for i, req in enumerate(requests)}

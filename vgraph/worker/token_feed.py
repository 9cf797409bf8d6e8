"""Async scheduling's device-side token feed: a decode launched before the previous step's
tokens are back reads its input token from that step's sampled ids, on the device.

The runner keeps the last launched step's sampled ids (`remember`) in the input buffers' feed
slots (a copy on the stream, after the sampler) with each request's row. A step whose request has
a pending token (Request.num_pending_tokens: the host has not seen it) gets a placeholder id
from the host fill, and `fill` points that token's entry of the layout's feed_src at the
request's slot (every other token points at its own staged id). After the step's host-to-device
copy, `gather` writes feed_table[feed_src] into `ids`, the token ids the model reads: one
kernel, on the stream, after the previous step's sampler and before this step's forward.

A FULL graph records the copy and the gather as its first nodes (the runner's copy_inputs), so
a decode step with pending tokens launches one graph and nothing else, as a synchronous one
does; other steps run both on the stream before their forward. VGRAPH_FEED_IN_GRAPH=0 (read when
the runner is built) leaves them out of the graphs (comparisons).

The host reuses its pinned staging (the input buffers' twin, the planner's) every step. Steps
overlap, so before filling a step's inputs the host waits for the previous step's host-to-device
copies to have run (`wait_for_copies`): an event recorded right after the input copy, which
follows the planner's copies on the stream (they are issued before the input copy or the graph
that records it); in a graph it is an external event, a node of the graph, so the wait never
covers a forward.
"""

from __future__ import annotations

import os

import torch

from vgraph.request import Request
from vgraph.worker.input_batch import InputBuffers, StepInputs


def feed_in_graph() -> bool:
    """Whether FULL graphs record the input copy and the gather (VGRAPH_FEED_IN_GRAPH, default
    1)."""
    value = os.environ.get("VGRAPH_FEED_IN_GRAPH", "1")
    if value not in ("0", "1"):
        raise ValueError(f"VGRAPH_FEED_IN_GRAPH must be 0 or 1, got {value!r}")
    return value == "1"


class DeviceTokenFeed:
    def __init__(self, buffers: InputBuffers, device: torch.device) -> None:
        assert buffers.feed_slots > 0, "the input buffers need feed slots"
        self.buffers = buffers
        self.slots = buffers.feed_table[: buffers.feed_slots]  # the last step's sampled ids
        self.ids = torch.zeros(buffers.max_num_tokens, dtype=torch.int64, device=device)
        self.sampled = torch.zeros(0, dtype=torch.int64, device=device)  # the last step's [R]
        self.rows: dict[str, int] = {}  # request id -> its row of `sampled` (and slot)
        # recorded in graphs as a node of their own
        self.copied = None
        if device.type == "cuda":
            self.copied = torch.cuda.Event(external=True)
            # made now (lazily, the first record would be in a graph capture)
            self.copied.record(torch.cuda.current_stream(device))
        self.copied_recorded = False

    def wait_for_copies(self) -> None:
        """The previous step's host-to-device copy has run: its pinned staging is free."""
        if self.copied is not None and self.copied_recorded:
            self.copied.synchronize()

    def fill(self, requests: list[Request], step: StepInputs) -> None:
        """Point each pending token's feed source at its request's slot (the host side; the
        step's fill pointed every token at its own staged id)."""
        assert step.layout is not None
        src, rows = step.layout.np.feed_src, self.rows
        if step.max_query_len == 1:  # a token a request: request i's is token i
            for i, req in enumerate(requests):
                if req.num_pending_tokens:  # its next token is not on the host yet
                    src[i] = rows[req.request_id]
            return
        qsl = step.layout.np.query_start_loc
        for i, req in enumerate(requests):
            if req.num_pending_tokens:
                src[int(qsl[i + 1]) - 1] = rows[req.request_id]

    def copy_and_gather(self, step: StepInputs) -> None:
        """The step's host-to-device copy, the copy's event, then the gather (what a FULL graph
        records, and what other steps run on the stream)."""
        self.buffers.copy_to_device(step)
        if self.copied is not None:
            self.copied.record()
            self.copied_recorded = True
        self.gather(step)

    def gather(self, step: StepInputs) -> None:
        assert step.layout is not None
        t = step.num_tokens_padded
        torch.index_select(self.buffers.feed_table, 0, step.layout.gpu.feed_src, out=self.ids[:t])

    def input_ids(self, step: StepInputs) -> torch.Tensor:
        """The step's token ids, as the model reads them [num_tokens_padded]."""
        return self.ids[: step.num_tokens_padded]

    def remember(self, requests: list[Request], token_ids: torch.Tensor) -> None:
        """The step's sampled ids [R] (on the device): the next step's pending tokens, copied to
        the feed slots. The tensor is also kept (sampling_inputs reads it for penalised
        requests' pending outputs): nothing writes the sampler's output after it, and the
        caching allocator keeps its memory while it is held."""
        self.sampled = token_ids
        self.slots[: len(token_ids)].copy_(token_ids, non_blocking=True)
        self.rows = {req.request_id: i for i, req in enumerate(requests)}

"""The model runner's sampling stage: logits of each request's last token -> sampled tokens.

It keeps what sampling carries across steps (each seeded request's generator, penalised requests'
token codes, the host staging buffer of the processors' inputs) and orders the host work so that
all of it overlaps the device computing the logits: 1. the sampling inputs are built and copied
(sampling_inputs.py), 2. the grammar bitmask is filled (the engine core's callback) and joins
them, 3. the Sampler runs on the device. It runs outside every graph and must not read anything
back from the device: the step's one device-to-host copy is runner_output.start_to_host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from vgraph.request import Request
from vgraph.sample.sampler import Sampler, SamplerOutput
from vgraph.worker.sampling_inputs import HostStaging, PenaltyTokens, build_sampling_metadata
from vgraph.worker.token_feed import DeviceTokenFeed

BitmaskFn = Callable[[], "torch.Tensor | None"]  # -> [R, ceil(V / 32)] int32 host bitmask


class StepSampler:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.sampler = Sampler()
        self.staging = HostStaging(device)  # the sampling processors' one host-to-device copy
        self.penalty_tokens = PenaltyTokens()  # penalised requests' token codes, across steps
        self.generators: dict[str, torch.Generator] = {}  # request id -> seeded generator
        # async scheduling: the last step's sampled ids, for penalised requests' pending outputs
        self.token_feed: DeviceTokenFeed | None = None

    def forget(self, request_id: str) -> None:
        """Drop what a finished request left: its generator and its token codes."""
        self.generators.pop(request_id, None)
        self.penalty_tokens.forget(request_id)

    def __call__(
        self,
        requests: list[Request],  # the step's, in batch order
        logits: torch.Tensor,  # [num_reqs, vocab_size]: the real requests' rows (Sampler)
        grammar_bitmask: BitmaskFn | None = None,
        greedy: torch.Tensor | None = None,  # [num_reqs] int64: their argmax, if the head has it
        # per request, whether its token is kept (not a partial chunk): SchedulerOutput.samples
        kept: Callable[[], Sequence[bool]] | None = None,
    ) -> SamplerOutput:
        """The sampling inputs are built first, then the bitmask is filled and joins them: all
        host work while the device computes the logits."""
        md = build_sampling_metadata(
            requests,
            self.generators,
            self.device,
            staging=self.staging,
            bitmask_follows=grammar_bitmask is not None,
            penalty_tokens=self.penalty_tokens,
            feed=self.token_feed,
            kept=kept,
        )
        bitmask = None if grammar_bitmask is None else grammar_bitmask()
        if bitmask is not None:
            assert md.processors is not None
            md.processors.bitmask = bitmask.to(self.device, non_blocking=True)
        return self.sampler(logits, md, greedy)

"""What one step of the model runner returns (ModelRunnerOutput), and start_to_host, the step's
one device-to-host copy that fills it (a PendingOutput until the copy is waited for): the sampled
ids, with the logprobs (when some request asked) packed beside them in one float64 tensor,
unpacked per request on the host.

It only reads a SamplerOutput: it must not sample, and must not copy anything else to the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from vgraph.outputs import TokenLogprobs
from vgraph.request import Request
from vgraph.sample.sampler import SamplerOutput


@dataclass
class ModelRunnerOutput:
    sampled_token_ids: list[int]  # one per scheduled request, in batch order
    logprobs: list[TokenLogprobs | None]
    # batch row -> the prompt tokens this step scored (requests with prompt_logprobs only)
    prompt_logprobs: dict[int, list[TokenLogprobs]] = field(default_factory=dict)


class PendingOutput:
    """A launched step's output on its way to the host: the one device-to-host copy is issued
    (non-blocking, into pinned memory on CUDA) when it is made, and result() waits for it and
    unpacks it. Made by start_to_host; the step's one read-back."""

    def __init__(
        self,
        requests: list[Request],
        host: torch.Tensor,  # [R] int64 ids, or [R, 2 + 2 * (1 + n)] float64 packed logprobs
        done: torch.cuda.Event | None,
        prompt_logprobs: dict[int, list[TokenLogprobs]],
    ) -> None:
        self.requests = requests
        self.host = host
        self.done = done
        self.prompt_logprobs = prompt_logprobs

    def result(self) -> ModelRunnerOutput:
        if self.done is not None:
            self.done.synchronize()
        if self.host.dim() == 1:
            out = ModelRunnerOutput(self.host.tolist(), [None] * len(self.requests))
        else:
            out = unpack_logprobs(self.requests, self.host.tolist(), self.host.shape[1])
        out.prompt_logprobs = self.prompt_logprobs
        return out


def start_to_host(
    requests: list[Request],
    out: SamplerOutput,
    prompt_logprobs: dict[int, list[TokenLogprobs]] | None = None,
) -> PendingOutput:
    """Issue the step's one device-to-host transfer (logprobs packed beside the ids); requests:
    the step's, in batch order (each keeps the top-n its SamplingParams.logprobs asks for)."""
    if out.logprobs is None:
        packed = out.token_ids
    else:  # float64 holds token ids exactly, so one tensor carries everything
        packed = torch.cat(
            [out.token_ids[:, None], out.ranks[:, None], out.logprob_token_ids, out.logprobs],
            1,
        ).double()  # [R, 2 + 2 * (1 + n)]: id, rank, 1 + n logprob ids, 1 + n logprobs
    done = None
    if packed.device.type == "cuda":
        host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True)
        host.copy_(packed, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
    else:
        host = packed.clone()
    return PendingOutput(requests, host, done, prompt_logprobs or {})


def to_host(requests: list[Request], out: SamplerOutput) -> ModelRunnerOutput:
    """start_to_host, waited for."""
    return start_to_host(requests, out).result()


def unpack_logprobs(
    requests: list[Request], packed: list[list[float]], num_columns: int
) -> ModelRunnerOutput:
    """Rows of start_to_host's packed tensor -> ids and each request's TokenLogprobs."""
    width = (num_columns - 2) // 2  # 1 + n: the sampled token and the top-n
    token_ids, entries = [], []
    for row, req in zip(packed, requests):
        token_ids.append(int(row[0]))
        n = req.sampling_params.logprobs
        if n is None:
            entries.append(None)
            continue
        ids = [int(t) for t in row[2 : 3 + n]]
        entries.append(TokenLogprobs(ids, row[2 + width : 3 + width + n], int(row[1])))
    return ModelRunnerOutput(token_ids, entries)

"""What one step of the model runner returns (ModelRunnerOutput), and to_host, the step's one
device-to-host copy that fills it: the sampled ids, with the logprobs (when some request asked)
packed beside them in one float64 tensor, unpacked per request on the host.

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


def to_host(requests: list[Request], out: SamplerOutput) -> ModelRunnerOutput:
    """The step's one device-to-host transfer (logprobs packed beside the ids); requests: the
    step's, in batch order (each keeps the top-n its SamplingParams.logprobs asks for)."""
    if out.logprobs is None:
        return ModelRunnerOutput(out.token_ids.tolist(), [None] * len(requests))
    # float64 holds token ids exactly, so one tensor carries everything
    packed = (
        torch.cat(
            [out.token_ids[:, None], out.ranks[:, None], out.logprob_token_ids, out.logprobs],
            1,
        )
        .double()
        .tolist()
    )  # [R, 2 + 2 * (1 + n)]: id, rank, 1 + n logprob ids, 1 + n logprobs
    width = out.logprobs.shape[1]
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

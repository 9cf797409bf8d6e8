"""Per-step sampling tensors from the scheduled requests' SamplingParams."""

from __future__ import annotations

import torch

from vgraph.request import Request
from vgraph.sample.sampler import SamplingMetadata


def build_sampling_metadata(
    requests: list[Request], generators: dict[str, torch.Generator], device: torch.device
) -> SamplingMetadata:
    """generators: request id -> its seeded generator, created here on first sight."""
    params = [r.sampling_params for r in requests]
    max_num_logprobs = max((p.logprobs for p in params if p.logprobs is not None), default=None)
    banned = _min_tokens_bans(requests, device)
    if all(p.temperature == 0.0 for p in params):  # argmax only: no per-row tensors to copy
        return SamplingMetadata(
            temperature=None,
            top_k=None,
            top_p=None,
            min_p=None,
            generators={},
            all_greedy=True,
            need_top_k=False,
            need_top_p=False,
            need_min_p=False,
            max_num_logprobs=max_num_logprobs,
            banned=banned,
        )
    row_gens: dict[int, torch.Generator] = {}
    for i, (req, p) in enumerate(zip(requests, params)):
        if p.seed is not None and p.temperature > 0.0:
            gen = generators.get(req.request_id)
            if gen is None:
                gen = torch.Generator(device=device).manual_seed(p.seed)
                generators[req.request_id] = gen
            row_gens[i] = gen
    # -1 (off) becomes a huge k so one comparison covers both cases
    top_k = [p.top_k if p.top_k > 0 else 1 << 30 for p in params]
    host = torch.tensor(
        [[p.temperature for p in params], [p.top_p for p in params], [p.min_p for p in params]],
        dtype=torch.float32,
    )
    on_dev = host.to(device, non_blocking=True)
    return SamplingMetadata(
        temperature=on_dev[0],
        top_k=torch.tensor(top_k, dtype=torch.int64).to(device, non_blocking=True),
        top_p=on_dev[1],
        min_p=on_dev[2],
        generators=row_gens,
        all_greedy=False,
        need_top_k=any(p.top_k > 0 for p in params),
        need_top_p=any(p.top_p < 1.0 for p in params),
        need_min_p=any(p.min_p > 0.0 for p in params),
        max_num_logprobs=max_num_logprobs,
        banned=banned,
    )


def _min_tokens_bans(
    requests: list[Request], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """EOS and stop_token_ids may not be sampled before a request has min_tokens outputs."""
    rows: list[int] = []
    cols: list[int] = []
    for i, req in enumerate(requests):
        p = req.sampling_params
        if req.num_output_tokens >= p.min_tokens:
            continue
        stops = set(p.stop_token_ids or ())
        if not p.ignore_eos:
            stops |= req.eos_token_ids
        rows.extend([i] * len(stops))
        cols.extend(stops)
    if not rows:
        return None
    pairs = torch.tensor([rows, cols], dtype=torch.int64).to(device, non_blocking=True)
    return pairs[0], pairs[1]

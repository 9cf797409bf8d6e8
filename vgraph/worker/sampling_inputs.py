"""Per-step sampling tensors from the scheduled requests' SamplingParams.

A temperature below SAMPLING_EPS is greedy here (written as 0.0, the sampler's greedy mark): divided
by such a temperature the logits overflow float32 and the sample is garbage. top_k is clamped to
what an int64 tensor holds and the vocabulary needs.
"""

from __future__ import annotations

import torch

from vgraph.request import Request
from vgraph.sample.sampler import SamplingMetadata
from vgraph.sampling_params import SAMPLING_EPS

_TOP_K_OFF = 1 << 30  # larger than any vocabulary: no row is cut


def build_sampling_metadata(
    requests: list[Request], generators: dict[str, torch.Generator], device: torch.device
) -> SamplingMetadata:
    """generators: request id -> its seeded generator, created here on first sight."""
    params = [r.sampling_params for r in requests]
    max_num_logprobs = max((p.logprobs for p in params if p.logprobs is not None), default=None)
    banned = _min_tokens_bans(requests, device)
    temperatures = [p.temperature if p.temperature >= SAMPLING_EPS else 0.0 for p in params]
    if all(t == 0.0 for t in temperatures):  # argmax only: no per-row tensors to copy
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
    for i, (req, p, t) in enumerate(zip(requests, params, temperatures)):
        if p.seed is not None and t > 0.0:
            gen = generators.get(req.request_id)
            if gen is None:
                gen = torch.Generator(device=device).manual_seed(p.seed)
                generators[req.request_id] = gen
            row_gens[i] = gen
    # -1 (off) becomes a huge k so one comparison covers both cases
    top_k = [min(p.top_k, _TOP_K_OFF) if p.top_k > 0 else _TOP_K_OFF for p in params]
    host = torch.tensor(
        [temperatures, [p.top_p for p in params], [p.min_p for p in params]],
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

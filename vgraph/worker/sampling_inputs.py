"""Per-step sampling tensors from the scheduled requests' SamplingParams.

A temperature below SAMPLING_EPS is greedy here (written as 0.0, the sampler's greedy mark): divided
by such a temperature the logits overflow float32 and the sample is garbage. top_k is clamped to
what an int64 tensor holds and the vocabulary needs. Logits-processor inputs (bans, allowed lists,
logit_bias, penalties) are built only when some request of the step asks for them: host lists,
then one non-blocking copy each; nothing is read back.
"""

from __future__ import annotations

import numpy as np
import torch

from vgraph.request import Request
from vgraph.sample.logits_processors import AllowedInputs, PenaltyInputs
from vgraph.sample.sampler import SamplingMetadata
from vgraph.sampling_params import SAMPLING_EPS

_TOP_K_OFF = 1 << 30  # larger than any vocabulary: no row is cut


def build_sampling_metadata(
    requests: list[Request],
    generators: dict[str, torch.Generator],
    device: torch.device,
    vocab_size: int,
    grammar_bitmask: torch.Tensor | None = None,  # [R, ceil(V / 32)] int32, on the device
) -> SamplingMetadata:
    """generators: request id -> its seeded generator, created here on first sight."""
    params = [r.sampling_params for r in requests]
    max_num_logprobs = max((p.logprobs for p in params if p.logprobs is not None), default=None)
    processors = {
        "banned": _bans(requests, device),
        "grammar_bitmask": grammar_bitmask,
        "allowed": _allowed(requests, device),
        "logit_bias": _logit_bias(requests, device),
        "penalties": _penalties(requests, device, vocab_size),
    }
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
            **processors,
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
        **processors,
    )


def _bans(
    requests: list[Request], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """EOS and stop_token_ids may not be sampled before a request has min_tokens outputs; the
    last token of a bad word may not follow the rest of it (a one-token bad word: never)."""
    rows: list[int] = []
    cols: list[int] = []
    for i, req in enumerate(requests):
        p = req.sampling_params
        banned: set[int] = set()
        if req.num_output_tokens < p.min_tokens:
            banned.update(p.stop_token_ids or ())
            if not p.ignore_eos:
                banned |= req.eos_token_ids
        if p.bad_words_token_ids:
            out = req.output_token_ids
            for word in p.bad_words_token_ids:
                prefix = word[:-1]
                if len(prefix) <= len(out) and out[len(out) - len(prefix) :] == prefix:
                    banned.add(word[-1])
        rows.extend([i] * len(banned))
        cols.extend(banned)
    return _pairs(rows, cols, device)


def _allowed(requests: list[Request], device: torch.device) -> AllowedInputs | None:
    restricted = [i for i, r in enumerate(requests) if r.sampling_params.allowed_token_ids]
    if not restricted:
        return None
    rows: list[int] = []
    cols: list[int] = []
    for i in restricted:
        ids = requests[i].sampling_params.allowed_token_ids or []
        rows.extend([i] * len(ids))
        cols.extend(ids)
    pairs = _pairs(rows, cols, device)
    assert pairs is not None
    return AllowedInputs(torch.tensor(restricted).to(device, non_blocking=True), pairs)


def _logit_bias(
    requests: list[Request], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for i, req in enumerate(requests):
        for token_id, bias in (req.sampling_params.logit_bias or {}).items():
            rows.append(i)
            cols.append(token_id)
            values.append(bias)
    pairs = _pairs(rows, cols, device)
    if pairs is None:
        return None
    bias = torch.tensor(values, dtype=torch.float32).to(device, non_blocking=True)
    return pairs[0], pairs[1], bias


def _penalties(
    requests: list[Request], device: torch.device, vocab_size: int
) -> PenaltyInputs | None:
    params = [r.sampling_params for r in requests]
    if not any(p.needs_penalties for p in params):
        return None
    host = torch.tensor(
        [
            [p.presence_penalty for p in params],
            [p.frequency_penalty for p in params],
            [p.repetition_penalty for p in params],
        ],
        dtype=torch.float32,
    ).to(device, non_blocking=True)
    # rows without penalties contribute no ids: their counts stay 0, their penalties neutral
    outputs = [r.output_token_ids if p.needs_penalties else [] for r, p in zip(requests, params)]
    prompts = [
        r.prompt_token_ids if p.repetition_penalty != 1.0 else [] for r, p in zip(requests, params)
    ]
    return PenaltyInputs(
        presence=host[0],
        frequency=host[1],
        repetition=host[2],
        output_token_ids=_padded(outputs, vocab_size, device),
        prompt_token_ids=_padded(prompts, vocab_size, device),
    )


def _padded(rows: list[list[int]], pad: int, device: torch.device) -> torch.Tensor:
    """[R, max(1, longest)] int64 of the rows, right-padded with pad."""
    out = np.full((len(rows), max(1, max(len(r) for r in rows))), pad, dtype=np.int64)
    for i, ids in enumerate(rows):
        out[i, : len(ids)] = ids
    return torch.from_numpy(out).to(device, non_blocking=True)


def _pairs(
    rows: list[int], cols: list[int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    if not rows:
        return None
    pairs = torch.tensor([rows, cols], dtype=torch.int64).to(device, non_blocking=True)
    return pairs[0], pairs[1]

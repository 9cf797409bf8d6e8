"""Per-step sampling tensors from the scheduled requests' SamplingParams.

A temperature below SAMPLING_EPS is greedy here (written as 0.0, the sampler's greedy mark): divided
by such a temperature the logits overflow float32 and the sample is garbage. top_k is clamped to
what an int64 tensor holds and the vocabulary needs. Logits-processor inputs (bans, allowed lists,
logit_bias, penalties) are built only when some request of the step asks for them: packed on the
host into one staging buffer (pinned on CUDA), then one non-blocking copy; nothing is read back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Sequence

import numpy as np
import torch

from vgraph.request import Request
from vgraph.sample.logits_processors import (
    KIND_BITS,
    NEUTRAL_PARAMS,
    NUM_PARAMS,
    Kind,
    ProcessorInputs,
)
from vgraph.sample.sampler import SamplingMetadata
from vgraph.sampling_params import SAMPLING_EPS, SamplingParams
from vgraph.worker.token_feed import DeviceTokenFeed

_TOP_K_OFF = 1 << 30  # larger than any vocabulary: no row is cut


def build_sampling_metadata(
    requests: list[Request],
    generators: dict[str, torch.Generator],
    device: torch.device,
    grammar_bitmask: torch.Tensor | None = None,  # [R, ceil(V / 32)] int32, on the device
    staging: HostStaging | None = None,  # the runner's; a new one when not given
    bitmask_follows: bool = False,  # a bitmask joins the processors later (may stay None)
    penalty_tokens: PenaltyTokens | None = None,  # the runner's; a new one when not given
    feed: DeviceTokenFeed | None = None,  # async scheduling: the last step's sampled ids
    # per row, whether its token is kept (SchedulerOutput.samples; None: every row); called only
    # when a seeded row samples
    kept: Callable[[], Sequence[bool]] | None = None,
) -> SamplingMetadata:
    """generators: request id -> its seeded generator, created here on first sight; drawn from
    only for the rows whose token is kept (kept: SchedulerOutput.samples, asked only when a
    seeded row samples), so a partial prefill chunk does not advance it."""
    params = [r.sampling_params for r in requests]
    max_num_logprobs = max((p.logprobs for p in params if p.logprobs is not None), default=None)
    if staging is None:
        staging = HostStaging(device)
    processors = _processor_inputs(
        requests,
        grammar_bitmask,
        staging,
        bitmask_follows or grammar_bitmask is not None,
        penalty_tokens or PenaltyTokens(),
        feed,
    )
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
            processors=processors,
        )
    row_gens: dict[int, torch.Generator] = {}
    rows_kept: Sequence[bool] | None = None
    for i, (req, p, t) in enumerate(zip(requests, params, temperatures)):
        if p.seed is not None and t > 0.0:
            if rows_kept is None:
                rows_kept = [True] * len(requests) if kept is None else kept()
            if not rows_kept[i]:  # a partial prefill chunk's row: its token is dropped
                continue
            gen = generators.get(req.request_id)
            if gen is None:
                gen = torch.Generator(device=device).manual_seed(p.seed)
                generators[req.request_id] = gen
            row_gens[i] = gen
    # -1 (off) becomes a huge k so one comparison covers both cases (exact in float32: a power
    # of two, and k <= the vocabulary < 2**24)
    top_k = [min(p.top_k, _TOP_K_OFF) if p.top_k > 0 else _TOP_K_OFF for p in params]
    # pinned on CUDA: a copy from pageable memory may wait for the stream (the step in flight,
    # with async scheduling); the caching host allocator keeps the block until the copy ran
    host = torch.empty((4, len(params)), dtype=torch.float32, pin_memory=device.type == "cuda")
    host.numpy()[:] = [temperatures, [p.top_p for p in params], [p.min_p for p in params], top_k]
    on_dev = host.to(device, non_blocking=True)
    return SamplingMetadata(
        temperature=on_dev[0],
        top_k=on_dev[3].long(),
        top_p=on_dev[1],
        min_p=on_dev[2],
        generators=row_gens,
        all_greedy=False,
        need_top_k=any(p.top_k > 0 for p in params),
        need_top_p=any(p.top_p < 1.0 for p in params),
        need_min_p=any(p.min_p > 0.0 for p in params),
        max_num_logprobs=max_num_logprobs,
        processors=processors,
    )


class HostStaging:
    """Two growable host int32 buffers, pinned on CUDA, that the steps' processor inputs are
    packed into, in turn, and copied from in one non-blocking transfer each. Steps overlap with
    async scheduling: a buffer is rewritten two steps after its copy, once the event recorded
    after that copy has fired (by then it always has: the step before last has completed)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pin = device.type == "cuda"
        self.hosts = [torch.empty(0, dtype=torch.int32) for _ in range(2)]
        self.copied: list[torch.cuda.Event | None] = [None, None]
        self.turn = 0

    def to_device(self, parts: list[np.ndarray]) -> torch.Tensor:
        """The int32 arrays, concatenated, as one device tensor."""
        n = sum(len(part) for part in parts)
        self.turn ^= 1
        copied = self.copied[self.turn]
        if copied is not None:
            copied.synchronize()
        host = self.hosts[self.turn]
        if host.numel() < n:
            size = max(n, 2 * host.numel(), 4096)
            host = self.hosts[self.turn] = torch.empty(size, dtype=torch.int32, pin_memory=self.pin)
        np.concatenate(parts, out=host.numpy()[:n])
        if not self.pin:  # a CPU "copy" would alias the buffer that a later step overwrites
            return host[:n].clone().to(self.device)
        out = host[:n].to(self.device, non_blocking=True)
        if copied is None:
            copied = self.copied[self.turn] = torch.cuda.Event()
        copied.record()
        return out


class PenaltyTokens:
    """Each penalised request's entry codes so far (its prompt's when repetition counts it, then
    its outputs'), kept across steps: a step converts only the tokens sampled since the last one,
    where packing every row's whole history each step cost more host time than the device takes
    for a decode step at batch 32. The runner forgets finished requests."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[np.ndarray, int, bool]] = {}  # id -> (codes, used, prompt)

    def codes(self, req: Request, with_prompt: bool) -> np.ndarray:
        buf, used, prompt = self._rows.get(req.request_id, (None, 0, with_prompt))
        tokens = req.all_token_ids
        start = 0 if with_prompt else req.num_prompt_tokens
        if buf is None or prompt != with_prompt or used > len(tokens) - start:
            buf, used = np.empty(max(64, 2 * (len(tokens) - start)), np.int32), 0
        new = len(tokens) - start - used
        if new > 0:
            if used + new > len(buf):
                grown = np.empty(2 * (used + new), np.int32)
                grown[:used] = buf[:used]
                buf = grown
            tail = tokens[start + used :]
            codes = np.fromiter(tail, np.int32, new) << KIND_BITS
            if with_prompt and used < req.num_prompt_tokens:
                codes[: req.num_prompt_tokens - used] |= _PROMPT
            buf[used : used + new] = codes  # _OUTPUT is 0: output codes need no kind bits
            used += new
        self._rows[req.request_id] = (buf, used, with_prompt)
        return buf[:used]

    def forget(self, request_id: str) -> None:
        self._rows.pop(request_id, None)


def _processor_inputs(
    requests: list[Request],
    grammar_bitmask: torch.Tensor | None,
    staging: HostStaging,
    with_bitmask: bool,
    penalty_tokens: PenaltyTokens,
    feed: DeviceTokenFeed | None = None,
) -> ProcessorInputs | None:
    """The step's logits-processor entries, row by row, or None when no row has any and no
    bitmask comes. A penalised request whose last output is still pending (async scheduling)
    gets an entry for it filled on the device from the last step's sampled ids (feed)."""
    segments: list[Collection[int]] = []  # token ids, row by row, segment by segment
    kinds: list[int] = []  # each segment's kind
    lengths: list[int] = []  # each segment's length
    ready: list[tuple[int, np.ndarray]] = []  # (first entry, codes) of the penalised rows
    pending: list[tuple[int, int]] = []  # (entry, row of feed.sampled) of pending outputs
    row_ptr = np.zeros(len(requests) + 1, dtype=np.int32)
    params: list[tuple[float, float, float, float]] = []
    bias_at: list[tuple[int, Collection[float]]] = []  # (first entry, values) of logit_bias
    n = 0

    def add(ids: Collection[int], kind: int) -> None:
        nonlocal n
        segments.append(ids)
        kinds.append(kind)
        lengths.append(len(ids))
        n += len(ids)

    for i, req in enumerate(requests):
        p = req.sampling_params
        if p.logit_bias:
            bias_at.append((n, p.logit_bias.values()))
            add(p.logit_bias.keys(), _BIAS)
        banned = _banned(req)
        if banned:
            add(banned, _BAN)
        if p.allowed_token_ids:
            add(p.allowed_token_ids, _ALLOW)
        if p.needs_penalties:  # the prompt counts for repetition only
            codes = penalty_tokens.codes(req, with_prompt=p.repetition_penalty != 1.0)
            ready.append((n, codes))
            n += len(codes)
            if req.num_pending_tokens:
                assert feed is not None and req.num_pending_tokens == 1, req
                pending.append((n, feed.rows[req.request_id]))
                n += 1
            params.append(
                (p.presence_penalty, p.frequency_penalty, p.repetition_penalty, _restricted(p))
            )
        else:
            params.append((*NEUTRAL_PARAMS[:3], _restricted(p)))
        row_ptr[i + 1] = n
    if n == 0 and not with_bitmask and not any(q[3] for q in params):
        return None
    codes = np.empty(n, np.int32)
    listed = np.fromiter(itertools.chain.from_iterable(segments), np.int32, sum(lengths))
    listed = (listed << KIND_BITS) | np.repeat(np.array(kinds, np.int32), lengths)
    is_listed = np.ones(n, dtype=bool)
    for start, row_codes in ready:
        codes[start : start + len(row_codes)] = row_codes
        is_listed[start : start + len(row_codes)] = False
    for entry, _ in pending:
        codes[entry] = 0  # written on the device below
        is_listed[entry] = False
    codes[is_listed] = listed
    values = np.zeros(n, dtype=np.float32)
    for start, bias in bias_at:
        values[start : start + len(bias)] = list(bias)
    floats = np.array(params, dtype=np.float32).ravel()
    fills = np.array(pending, dtype=np.int32).T.ravel()  # [2 * P]: entries, then rows
    packed = staging.to_device(
        [row_ptr, codes, values.view(np.int32), floats.view(np.int32), fills]
    )
    r = len(requests)
    codes_dev = packed[r + 1 : r + 1 + n]
    if pending:
        assert feed is not None
        k = len(pending)
        fill = packed[len(packed) - 2 * k :].long()  # [2 * P]
        outputs = feed.sampled.index_select(0, fill[k:]) << KIND_BITS  # _OUTPUT is 0
        codes_dev.index_copy_(0, fill[:k], outputs.int())
    return ProcessorInputs(
        row_ptr=packed[: r + 1],
        codes=codes_dev,
        values=packed[r + 1 + n : r + 1 + 2 * n].view(torch.float32),  # bit patterns of float32
        params=packed[r + 1 + 2 * n : r + 1 + 2 * n + r * NUM_PARAMS]
        .view(torch.float32)
        .view(r, NUM_PARAMS),
        bitmask=grammar_bitmask,
    )


# plain ints: an enum member's attribute lookup costs more than the rest of a row
_OUTPUT, _PROMPT, _BIAS = int(Kind.OUTPUT), int(Kind.PROMPT), int(Kind.BIAS)
_BAN, _ALLOW = int(Kind.BAN), int(Kind.ALLOW)


def _restricted(p: SamplingParams) -> float:
    return 1.0 if p.allowed_token_ids else 0.0


def _banned(req: Request) -> set[int]:
    """EOS and stop_token_ids may not be sampled before a request has min_tokens outputs; the
    last token of a bad word may not follow the rest of it (a one-token bad word: never)."""
    p = req.sampling_params
    banned: set[int] = set()
    if req.num_output_tokens + req.num_pending_tokens < p.min_tokens:
        banned.update(p.stop_token_ids or ())
        if not p.ignore_eos:
            banned |= req.eos_token_ids
    if p.bad_words_token_ids:
        out = req.output_token_ids
        for word in p.bad_words_token_ids:
            prefix = word[:-1]
            if len(prefix) <= len(out) and out[len(out) - len(prefix) :] == prefix:
                banned.add(word[-1])
    return banned

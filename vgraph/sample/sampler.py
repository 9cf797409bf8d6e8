"""Sampler: logits processors, then greedy, temperature, top-k, top-p, min-p and per-request
seeds, all on the device.

No host sync: the per-request parameters arrive as tensors built by the runner, and the result
(token ids, their logprobs and the top-n) stays on the device until the runner's one copy.
Logprobs are those of the model's raw distribution (before temperature and truncation), as vLLM's.
Processors (sample/logits_processors.py) run first, in vLLM's order: bans (min_tokens, bad words),
the structured-output bitmask, allowed_token_ids, logit_bias, penalties; one pass over the logits,
only when some row of the batch asks for any. On CUDA with flashinfer installed, top-k/top-p steps
without seeded requests or min_p sample with FlashInfer's fused kernel
(sample/flashinfer_sampling.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vgraph._ext import use_cuda_op
from vgraph.sample import flashinfer_sampling
from vgraph.sample.logits_processors import ProcessorInputs, apply_processors

# the logits dtypes vgraph_C::argmax_rows takes
ARGMAX_ROWS_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass
class SamplingMetadata:
    # per-row parameters; None when every row is greedy (then they play no part)
    temperature: torch.Tensor | None  # [R] float32; 0 means greedy
    top_k: torch.Tensor | None  # [R] int64; off is written as 1 << 30 (any k >= vocab keeps all)
    top_p: torch.Tensor | None  # [R] float32; 1.0 means off
    min_p: torch.Tensor | None  # [R] float32; 0.0 means off
    generators: dict[int, torch.Generator]  # row -> generator of a seeded request
    all_greedy: bool
    need_top_k: bool
    need_top_p: bool
    need_min_p: bool
    max_num_logprobs: int | None  # top-n to return; None when no request asked for logprobs
    # bans (min_tokens, bad words), the grammar bitmask, allowed lists, logit_bias, penalties;
    # None when no row of the step has any
    processors: ProcessorInputs | None = None


@dataclass
class SamplerOutput:
    token_ids: torch.Tensor  # [R] int64
    logprob_token_ids: torch.Tensor | None  # [R, 1 + n]: sampled token, then the top-n
    logprobs: torch.Tensor | None  # [R, 1 + n] float32
    ranks: torch.Tensor | None  # [R] int64: rank of the sampled token (1 = most likely)


class Sampler:
    def __call__(
        self, logits: torch.Tensor, md: SamplingMetadata, greedy: torch.Tensor | None = None
    ) -> SamplerOutput:
        """logits: [R, vocab], float32 or the model's dtype (the fused LM head's): widened here
        once for logprobs or processors; sampling divides them by the temperature into float32
        (the same values either way); greedy rows need no float32. Logprobs are of these raw
        logits; bans apply to sampling. greedy: [R] int64, the raw logits' argmax where the LM
        head computed it (in a FULL graph), used unless a logits processor changes the logits."""
        if md.processors is not None or md.max_num_logprobs is not None:
            logits = logits.float()  # no copy where they are float32
        raw = logits
        logits = self.process(logits, md)
        if greedy is None or md.processors is not None:
            greedy = greedy_tokens(logits)
        if md.all_greedy:
            token_ids = greedy
        else:
            sampled = self._sample(logits, md)
            token_ids = torch.where(md.temperature == 0.0, greedy, sampled)
        if md.max_num_logprobs is None:
            return SamplerOutput(token_ids, None, None, None)
        logprobs = raw.log_softmax(dim=-1)
        top_lp, top_ids = logprobs.topk(md.max_num_logprobs, dim=-1)
        tok_lp = logprobs.gather(1, token_ids[:, None])
        ranks = (logprobs > tok_lp).sum(dim=-1) + 1
        return SamplerOutput(
            token_ids,
            torch.cat([token_ids[:, None], top_ids], dim=1),
            torch.cat([tok_lp, top_lp], dim=1),
            ranks,
        )

    @staticmethod
    def process(logits: torch.Tensor, md: SamplingMetadata) -> torch.Tensor:
        """The logits processors some row asks for; [R, V] -> [R, V]."""
        return logits if md.processors is None else apply_processors(logits, md.processors)

    def _sample(self, logits: torch.Tensor, md: SamplingMetadata) -> torch.Tensor:
        # greedy rows get temperature 1 here; their sample is discarded by the caller. The float32
        # temperature makes the quotient float32 whatever the logits' dtype.
        temp = torch.where(md.temperature == 0.0, 1.0, md.temperature)
        logits = logits / temp[:, None]
        if flashinfer_sampling.fast_path_applies(logits, md):
            return flashinfer_sampling.sample_top_k_top_p(logits, md)
        if md.need_top_k or md.need_top_p:
            logits = apply_top_k_top_p(
                logits, md.top_k if md.need_top_k else None, md.top_p if md.need_top_p else None
            )
        probs = logits.softmax(dim=-1)
        if md.need_min_p:
            keep = probs >= md.min_p[:, None] * probs.max(dim=-1, keepdim=True).values
            probs = torch.where(keep, probs, 0.0)
        return exponential_race(probs, md.generators)


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """Each row's argmax [R] int64, torch.argmax's choice; on CUDA for float32 or 16-bit rows one
    kernel (vgraph_C::argmax_rows, a cluster of CTAs per row) instead of torch's reduction: faster
    at every shipped vocabulary and batch size measured (H200, 2026-12-03: 1.5-5x at 1-64 float32
    rows, benchmarks/results/2026-12-03-h200-attn-groups/)."""
    if (
        use_cuda_op(logits, "argmax_rows")
        and logits.dtype in ARGMAX_ROWS_DTYPES
        and logits.stride(-1) == 1
    ):
        out = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
        torch.ops.vgraph_C.argmax_rows(out, logits)
        return out
    return logits.argmax(dim=-1)


def apply_top_k_top_p(
    logits: torch.Tensor,  # [R, V]
    top_k: torch.Tensor | None,  # [R] int64
    top_p: torch.Tensor | None,  # [R] float32
) -> torch.Tensor:
    """Mask everything outside each row's top-k and nucleus with -inf (one sort, no sync)."""
    sorted_logits, order = logits.sort(dim=-1, descending=False)
    vocab = logits.shape[-1]
    if top_k is not None:
        # ascending sort: the k largest are the last k; threshold is at index vocab - k
        kth = sorted_logits.gather(1, (vocab - top_k.clamp(1, vocab))[:, None])
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    if top_p is not None:
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= 1.0 - top_p[:, None]
        drop[:, -1] = False  # always keep the most likely token
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def exponential_race(probs: torch.Tensor, generators: dict[int, torch.Generator]) -> torch.Tensor:
    """Sample each row of probs by argmax(p / q), q ~ Exp(1): no host sync, no multinomial."""
    q = torch.empty_like(probs).exponential_()
    for row, gen in generators.items():
        q[row].exponential_(generator=gen)
    return greedy_tokens(probs / q)

"""Logits processors: bans, allowed-token lists, logit_bias and the three penalties, on the device.

Each takes the step's logits [R, V] float32 and device tensors built by the runner
(worker/sampling_inputs.py), returns new logits, and never reads a value back to the host: no
boolean indexing, no `.item()`. They run on the logits a graph replay returned, outside every
captured graph, so graph replay is the same with or without them. The sampler calls only those
some row of the batch asks for; a row at its neutral value is left as it was.

Penalties follow vLLM (and so the OpenAI and Hugging Face definitions):
  repetition (r): a token seen in the prompt or the output has its logit divided by r when
      positive, multiplied by r when not;
  frequency (f) and presence (p): logit -= f * count_in_output + p * (count_in_output > 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PenaltyInputs:
    presence: torch.Tensor  # [R] float32; 0 is off
    frequency: torch.Tensor  # [R] float32; 0 is off
    repetition: torch.Tensor  # [R] float32; 1 is off
    output_token_ids: torch.Tensor  # [R, L] int64, padded with V (a column that is dropped)
    prompt_token_ids: torch.Tensor  # [R, P] int64, padded with V


@dataclass
class AllowedInputs:
    restricted_rows: torch.Tensor  # [A] int64: rows that have an allowed list
    pairs: tuple[torch.Tensor, torch.Tensor]  # ([K] rows, [K] token ids) that stay allowed


def apply_bans(
    logits: torch.Tensor,  # [R, V]
    banned: tuple[torch.Tensor, torch.Tensor],  # ([K] rows, [K] token ids)
) -> torch.Tensor:
    return logits.index_put(banned, torch.tensor(float("-inf"), device=logits.device))


def apply_allowed(logits: torch.Tensor, allowed: AllowedInputs) -> torch.Tensor:
    """Rows with an allowed list keep only those tokens; other rows are untouched."""
    blocked = torch.zeros_like(logits, dtype=torch.bool)  # [R, V]
    blocked[allowed.restricted_rows] = True
    blocked.index_put_(allowed.pairs, torch.tensor(False, device=logits.device))
    return logits.masked_fill(blocked, float("-inf"))


def apply_logit_bias(
    logits: torch.Tensor,  # [R, V]
    bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor],  # ([K] rows, [K] ids, [K] float32)
) -> torch.Tensor:
    rows, cols, values = bias
    return logits.index_put((rows, cols), values, accumulate=True)


def token_counts(token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[R, L] ids padded with vocab_size -> [R, V] int32 counts (the pad column is dropped)."""
    counts = torch.zeros(
        token_ids.shape[0], vocab_size + 1, dtype=torch.int32, device=token_ids.device
    )
    counts.scatter_add_(1, token_ids, torch.ones_like(token_ids, dtype=torch.int32))
    return counts[:, :vocab_size]


def apply_penalties(logits: torch.Tensor, p: PenaltyInputs) -> torch.Tensor:
    vocab = logits.shape[1]
    out_counts = token_counts(p.output_token_ids, vocab)  # [R, V]
    seen = (out_counts > 0) | (token_counts(p.prompt_token_ids, vocab) > 0)  # [R, V]
    rep = torch.where(seen, p.repetition[:, None], 1.0)  # [R, V]
    logits = torch.where(logits > 0, logits / rep, logits * rep)
    logits = logits - p.frequency[:, None] * out_counts
    return logits - p.presence[:, None] * (out_counts > 0)


def apply_token_bitmask(
    logits: torch.Tensor,  # [R, V]
    bitmask: torch.Tensor,  # [R, ceil(V / 32)] int32: bit t % 32 of word t // 32 set = allowed
) -> torch.Tensor:
    """Structured outputs: tokens whose bit is clear get -inf (a row of all ones is untouched).
    The layout is xgrammar's, so its matchers fill the host rows directly."""
    shifts = torch.arange(32, dtype=torch.int32, device=logits.device)  # [32]
    bits = (bitmask[:, :, None] >> shifts) & 1  # [R, W, 32]
    allowed = bits.flatten(1)[:, : logits.shape[1]].bool()  # [R, V]
    return logits.masked_fill(~allowed, float("-inf"))

"""Logits processors: bans, allowed-token lists, logit_bias, the structured-output bitmask and the
three penalties, on the device, in one pass.

The runner packs what the step's requests ask for into ProcessorInputs (worker/sampling_inputs.py):
per row a list of entries (a token id, its kind and, for logit_bias, a value), CSR-packed and copied
in one transfer, plus per-row penalty values. apply_processors rewrites the step's logits [R, V]
float32 from them: on CUDA with one kernel (vgraph_C::apply_logits_processors, csrc/
sampling_cuda.cu), elsewhere with the torch path below, which is also the kernel's oracle. Neither
reads a value back to the host. They run on the logits a graph replay returned, outside every
captured graph, so graph replay is the same with or without them. A row at its neutral values is
left as it was.

Order and definitions follow vLLM (and so the OpenAI and Hugging Face definitions):
  bans (min_tokens, bad words), the bitmask and allowed lists mask tokens with -inf;
  logit_bias adds its value;
  repetition (r): a token seen in the prompt or the output has its logit divided by r when
      positive, multiplied by r when not;
  frequency (f) and presence (p): logit -= f * count_in_output + p * (count_in_output > 0).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from vgraph._ext import use_cuda_op


class Kind(enum.IntEnum):
    """What an entry says about its token (the low KIND_BITS of its code)."""

    OUTPUT = 0  # one occurrence in the output (frequency, presence, repetition)
    PROMPT = 1  # occurs in the prompt (repetition)
    BIAS = 2  # logit_bias: add the entry's value
    BAN = 3  # may not be sampled this step (min_tokens, bad words)
    ALLOW = 4  # stays allowed in a row restricted to its allowed_token_ids


KIND_BITS = 3
NUM_PARAMS = 4  # per row: presence, frequency, repetition, restricted (1.0: allowed list)
NEUTRAL_PARAMS = (0.0, 0.0, 1.0, 0.0)


@dataclass
class ProcessorInputs:
    row_ptr: torch.Tensor  # [R + 1] int32: row r's entries are codes[row_ptr[r]:row_ptr[r + 1]]
    codes: torch.Tensor  # [N] int32: token_id << KIND_BITS | kind
    values: torch.Tensor  # [N] float32: the bias of a BIAS entry, else 0
    params: torch.Tensor  # [R, NUM_PARAMS] float32
    bitmask: torch.Tensor | None = None  # [R, ceil(V / 32)] int32 (xgrammar's layout)


def apply_processors(logits: torch.Tensor, p: ProcessorInputs) -> torch.Tensor:
    """[R, V] float32 -> new processed logits (the input is left alone: logprobs read it)."""
    if use_cuda_op(logits, "apply_logits_processors"):
        out = torch.empty_like(logits)
        torch.ops.vgraph_C.apply_logits_processors(
            out, logits, p.bitmask, p.row_ptr, p.codes, p.values, p.params
        )
        return out
    return apply_processors_torch(logits, p)


def apply_processors_torch(logits: torch.Tensor, p: ProcessorInputs) -> torch.Tensor:
    """The same in torch ops: one indexed add gathers every entry into [kind, R, V] planes (a
    token id outside the vocabulary raises, where a flat index would land in another row)."""
    rows, vocab = logits.shape
    n = p.codes.shape[0]
    row_of = torch.repeat_interleave(
        torch.arange(rows, device=logits.device), p.row_ptr.diff(), output_size=n
    )
    kinds = (p.codes & ((1 << KIND_BITS) - 1)).long()
    ids = (p.codes >> KIND_BITS).long()
    planes = torch.zeros(len(Kind), rows, vocab, dtype=torch.float32, device=logits.device)
    weights = torch.where(kinds == Kind.BIAS, p.values, 1.0)
    planes.index_put_((kinds, row_of, ids), weights, accumulate=True)
    counts, prompt, bias, banned, allowed = planes.unbind(0)
    presence, frequency, repetition, restricted = p.params.unbind(1)
    masked = (banned > 0) | ((restricted[:, None] != 0) & (allowed == 0))
    if p.bitmask is not None:
        masked |= ~bitmask_allowed(p.bitmask, vocab)
    x = logits.masked_fill(masked, float("-inf")) + bias
    rep = torch.where((prompt > 0) | (counts > 0), repetition[:, None], 1.0)
    x = torch.where(x > 0, x / rep, x * rep)
    x = x - frequency[:, None] * counts
    return x - presence[:, None] * (counts > 0)


def bitmask_allowed(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """[R, ceil(V / 32)] int32 -> [R, V] bool: bit t % 32 of word t // 32 set = allowed."""
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)  # [32]
    bits = (bitmask[:, :, None] >> shifts) & 1  # [R, W, 32]
    return bits.flatten(1)[:, :vocab].bool()


def apply_token_bitmask(
    logits: torch.Tensor,  # [R, V]
    bitmask: torch.Tensor,  # [R, ceil(V / 32)] int32: bit t % 32 of word t // 32 set = allowed
) -> torch.Tensor:
    """Structured outputs: tokens whose bit is clear get -inf (a row of all ones is untouched).
    The layout is xgrammar's, so its matchers fill the host rows directly."""
    return logits.masked_fill(~bitmask_allowed(bitmask, logits.shape[1]), float("-inf"))

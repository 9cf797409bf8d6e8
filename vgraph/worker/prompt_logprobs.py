"""Prompt logprobs: for requests that ask (SamplingParams.prompt_logprobs), the logprob of every
prompt token given the tokens before it, with the top-n, computed chunk by chunk as the prompt is
prefilled.

They need the hidden state of every prompt token, which a FULL graph (the LM head on the last
token only) does not return: such a step runs the model without the head (piecewise or eager,
runner.dispatch decides) and the head runs here on the rows needed. Position p of a chunk gives
the logprob of prompt token p + 1; positions already reported (a request resumed after
preemption prefills its prompt again) are skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from vgraph.core.scheduler import SchedulerOutput
from vgraph.outputs import TokenLogprobs

MAX_ROWS_PER_HEAD = 512  # prompt positions per LM-head call: bounds the [rows, vocab] logits


@dataclass
class PromptSpan:
    row: int  # the request's index in the step
    token_offset: int  # where its positions start among the step's tokens
    first_target: int  # index in the prompt of the first token scored (>= 1)
    num: int  # prompt tokens scored in this step
    top_n: int


def prompt_logprob_spans(sched: SchedulerOutput) -> list[PromptSpan]:
    """The prompt tokens this step scores, per request that asked for prompt logprobs."""
    spans, offset = [], 0
    for i, (req, n) in enumerate(zip(sched.requests, sched.num_scheduled_tokens)):
        top_n = req.sampling_params.prompt_logprobs
        if top_n is None:  # most requests: nothing to score
            offset += n
            continue
        c = req.num_computed_tokens
        # position p scores prompt token p + 1; the first one not yet reported
        start = max(c, req.num_prompt_logprobs)
        end = min(c + n, req.num_prompt_tokens - 1)
        if end > start:
            spans.append(PromptSpan(i, offset + start - c, start + 1, end - start, top_n))
        offset += n
    return spans


def compute_prompt_logprobs(
    hidden: torch.Tensor,  # [num_tokens_padded, hidden_size]
    compute_logits: Callable[[torch.Tensor], torch.Tensor],
    sched: SchedulerOutput,
    spans: list[PromptSpan],
) -> dict[int, list[TokenLogprobs]]:
    """row -> one TokenLogprobs per scored prompt token (the prompt token first, then top-n)."""
    out: dict[int, list[TokenLogprobs]] = {}
    for span in spans:
        prompt = sched.requests[span.row].prompt_token_ids
        entries: list[TokenLogprobs] = []
        for lo in range(0, span.num, MAX_ROWS_PER_HEAD):
            hi = min(lo + MAX_ROWS_PER_HEAD, span.num)
            rows = hidden[span.token_offset + lo : span.token_offset + hi]  # [k, hidden]
            logprobs = compute_logits(rows).float().log_softmax(dim=-1)  # [k, V]
            first = span.first_target + lo
            targets = torch.tensor(prompt[first : first + hi - lo], device=hidden.device)  # [k]
            target_lp = logprobs.gather(1, targets[:, None])  # [k, 1]
            ranks = (logprobs > target_lp).sum(dim=-1) + 1  # [k]
            top_lp, top_ids = logprobs.topk(span.top_n, dim=-1)  # [k, n]
            ids = torch.cat([targets[:, None], top_ids], 1).tolist()
            lps = torch.cat([target_lp, top_lp], 1).tolist()
            entries += [TokenLogprobs(i, lp, r) for i, lp, r in zip(ids, lps, ranks.tolist())]
        out[span.row] = entries
    return out


def logits_and_prompt_logprobs(
    hidden: torch.Tensor,  # [num_tokens_padded, hidden_size]
    query_start_loc: torch.Tensor,  # [num_reqs_padded + 1] int32
    compute_logits: Callable[[torch.Tensor], torch.Tensor],
    sched: SchedulerOutput,
    spans: list[PromptSpan],
) -> tuple[torch.Tensor, dict[int, list[TokenLogprobs]]]:
    """The head on each request's last token, as a FULL graph would run it (the sampler's
    logits [num_reqs_padded, V] float32), and on the prompt tokens the spans score."""
    last = query_start_loc[1:].long() - 1  # [num_reqs_padded]
    logits = compute_logits(hidden[last]).float()
    return logits, compute_prompt_logprobs(hidden, compute_logits, sched, spans)

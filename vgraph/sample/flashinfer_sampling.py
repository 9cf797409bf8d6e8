"""FlashInfer's fused top-k/top-p sampling: the sampler's fast path on CUDA where flashinfer is
installed.

Measured on the H200 (benchmarks/bench_sampler.py; benchmarks/results/
2026-12-01-h200-backends-prefix): 1.8-8x faster than the sort-based path at batch 1-128 and
vocabularies of 49k-152k, because it samples by rejection instead of sorting the vocabulary.
It draws from the same distribution (top-k first, then top-p over the renormalised top-k, as
apply_top_k_top_p), but from its own random stream: a step with any seeded request, or with
min_p, keeps the sort-based path so seeded requests stay reproducible.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from vgraph.sample.sampler import SamplingMetadata


@cache
def _flashinfer_sampling():
    """flashinfer.sampling, or None when flashinfer is not installed or can't load."""
    if importlib.util.find_spec("flashinfer") is None:
        return None
    try:
        import flashinfer.sampling
    except Exception:  # noqa: BLE001 - a broken install must not take sampling down
        return None
    return flashinfer.sampling


def fast_path_applies(logits: torch.Tensor, md: SamplingMetadata) -> bool:
    """Whether this step's sampling can run FlashInfer's kernel (see the module docstring)."""
    return (
        logits.is_cuda
        and (md.need_top_k or md.need_top_p)
        and not md.need_min_p
        and not md.generators
        and _flashinfer_sampling() is not None
    )


def sample_top_k_top_p(
    logits: torch.Tensor,  # [R, V] float32, already divided by the temperature
    md: SamplingMetadata,
) -> torch.Tensor:  # [R] int64
    """One token per row from the top-k/top-p truncation of softmax(logits)."""
    vocab = logits.shape[-1]
    top_k = md.top_k.clamp(1, vocab).int() if md.need_top_k else vocab
    top_p = md.top_p if md.need_top_p else 1.0
    ids = _flashinfer_sampling().top_k_top_p_sampling_from_logits(
        logits, top_k, top_p, deterministic=True
    )
    return ids.long()

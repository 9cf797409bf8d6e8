"""The tensor-parallel group of this process: its rank, its size and the torch.distributed group.

One group per process, set once at start-up by `init_tensor_parallel` (the engine core for rank
0, each worker process for its rank) before the model is built: layers read `get_tp()` when they
are constructed, as vLLM's layers read get_tensor_model_parallel_rank(). Without a call the
process is rank 0 of 1 and nothing here touches torch.distributed. NCCL on CUDA, gloo on the CPU;
the rendezvous is a file store in the engine's private folder (no port to race for).
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

# A collective waits at most this long for a peer; a dead peer is found sooner by the process
# sentinels (tp_workers.py), this only bounds what nothing else notices.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=120)


@dataclass(frozen=True)
class TPGroup:
    rank: int = 0
    world_size: int = 1
    device: torch.device | None = None  # where collectives run (the rank's GPU, or the CPU)

    @property
    def is_first_rank(self) -> bool:
        return self.rank == 0


_TP = TPGroup()


def get_tp() -> TPGroup:
    return _TP


def init_tensor_parallel(
    rank: int, world_size: int, device: torch.device, rendezvous_file: str
) -> TPGroup:
    """Join the group (blocks until every rank has joined). device: cuda (this rank's GPU is
    made current: cuda:rank) or cpu."""
    global _TP
    if world_size == 1:
        _TP = TPGroup(0, 1, device)
        return _TP
    if device.type == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"file://{rendezvous_file}",
        rank=rank,
        world_size=world_size,
        timeout=COLLECTIVE_TIMEOUT,
    )
    _TP = TPGroup(rank, world_size, device)
    logger.info("tensor parallel rank %d of %d joined (%s)", rank, world_size, backend)
    return _TP


def destroy_tensor_parallel() -> None:
    global _TP
    if _TP.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()
    _TP = TPGroup()


def check_same_on_all_ranks(value: int, what: str) -> None:
    """Raise if an int differs between ranks (e.g. the graph keys each rank will capture: ranks
    that captured different graphs would replay different collectives and hang)."""
    tp = get_tp()
    if tp.world_size == 1:
        return
    t = torch.tensor([value, -value], dtype=torch.int64, device=tp.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if int(t[0]) != -int(t[1]):
        raise RuntimeError(f"tensor parallel ranks disagree on {what}")


def min_over_ranks(value: int) -> int:
    tp = get_tp()
    if tp.world_size == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=tp.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t[0])

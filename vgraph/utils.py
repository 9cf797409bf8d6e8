"""Small helpers with no vgraph imports, shared by every layer of the package."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling of a / b for positive b (blocks needed for a tokens, and the like)."""
    return -(-a // b)


def thread_lock_for_progress_bars() -> None:
    """tqdm's lock in a process that ends with os._exit (the engine core, TP workers): a thread
    lock, so that tqdm makes no multiprocessing semaphore for the resource tracker to report as
    leaked when the process exits."""
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())

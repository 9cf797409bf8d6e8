"""Device memory readings and the KV cache budget of one engine (CUDA).

Sizing follows vLLM's per-instance rule: gpu_memory_utilization is the share of the device this
engine may use, whatever else runs on it; other engines (in this process or others) only limit
the cache to what is free. It must not allocate anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DeviceMemory:
    """One reading of the device's memory (CUDA); zeros elsewhere."""

    total: int
    free: int  # free on the device (all processes)
    reserved: int  # held by this process's caching allocator
    allocated: int  # in live tensors of this process

    @staticmethod
    def now(device: torch.device) -> DeviceMemory:
        if device.type != "cuda":
            return DeviceMemory(0, 0, 0, 0)
        free, total = torch.cuda.mem_get_info(device)
        return DeviceMemory(
            total, free, torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device)
        )

    @property
    def outside_allocator(self) -> int:
        """In use but not by this process's tensors: CUDA context and libraries, other
        processes."""
        return self.total - self.free - self.reserved


def kv_cache_budget(
    start: DeviceMemory,
    now: DeviceMemory,
    gpu_memory_utilization: float,
    model_bytes: int,
    activation_bytes: int,
) -> int:
    """Bytes for the KV cache of one engine, as vLLM sizes it: the engine may use
    gpu_memory_utilization of the device, less its weights, its activation peak and what CUDA
    libraries took outside the allocator since it started (start: before loading the model).
    Engines started earlier in the process or on other processes do not count against the
    share, but the cache can't be bigger than what the device has free now."""
    libraries = max(now.outside_allocator - start.outside_allocator, 0)
    share = int(now.total * gpu_memory_utilization) - model_bytes - activation_bytes - libraries
    available = now.free + now.reserved - now.allocated  # free plus cached in this process
    return max(min(share, available), 0)

"""KV cache sizing of one engine on CUDA (the arithmetic; tests/gpu runs it on a device)."""

from __future__ import annotations

from vgraph.worker.memory import DeviceMemory, kv_cache_budget

GIB = 1 << 30


def reading(free: float, reserved: float = 0, allocated: float = 0) -> DeviceMemory:
    return DeviceMemory(int(100 * GIB), int(free * GIB), int(reserved * GIB), int(allocated * GIB))


def test_alone_on_the_device_the_share_less_weights_activations_and_libraries():
    start = reading(free=99.5)  # CUDA context: 0.5 GiB
    # after load + profile: 2 GiB weights allocated, 3 GiB reserved, 1 GiB of cuBLAS workspace
    now = reading(free=95.5, reserved=3, allocated=2)
    got = kv_cache_budget(start, now, 0.5, model_bytes=2 * GIB, activation_bytes=1 * GIB)
    assert got == 50 * GIB - 2 * GIB - 1 * GIB - 1 * GIB


def test_an_earlier_engine_in_the_process_does_not_count_against_the_share():
    # the first engine holds 40 GiB (weights + KV) of this process's allocator
    start = reading(free=59.5, reserved=40, allocated=40)
    now = reading(free=56.5, reserved=43, allocated=42)
    got = kv_cache_budget(start, now, 0.4, model_bytes=2 * GIB, activation_bytes=1 * GIB)
    assert got == 40 * GIB - 3 * GIB  # the same as the first engine got with the same share


def test_the_cache_is_capped_at_what_the_device_has_free():
    start = reading(free=20)  # another process holds 80 GiB
    now = reading(free=17, reserved=3, allocated=2)
    got = kv_cache_budget(start, now, 0.9, model_bytes=2 * GIB, activation_bytes=1 * GIB)
    assert got == 17 * GIB + 1 * GIB  # free, plus what this process has cached but not in use


def test_nothing_left_is_zero_not_negative():
    now = reading(free=90, reserved=10, allocated=9)
    assert kv_cache_budget(reading(free=100), now, 0.05, 9 * GIB, GIB) == 0


def test_readings_off_cuda_are_zero():
    import torch

    assert DeviceMemory.now(torch.device("cpu")) == DeviceMemory(0, 0, 0, 0)

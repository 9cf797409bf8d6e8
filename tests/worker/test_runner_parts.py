"""The runner's parts on their own (CPU): the KV cache's block count and tensors, the step's
device-to-host unpacking, and the step message rank 0 sends the tensor-parallel workers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vgraph.attention.torch_backend import TorchAttentionBackend
from vgraph.config import CacheConfig, ModelConfig
from vgraph.config.modes import CUDAGraphMode
from vgraph.core.scheduler import SchedulerOutput
from vgraph.cudagraph.dispatcher import BatchDescriptor
from vgraph.distributed.messages import DECODER, ENCODER, TPStep, build_tp_step
from vgraph.request import Request
from vgraph.sample.sampler import SamplerOutput
from vgraph.sampling_params import SamplingParams
from vgraph.worker.input_batch import StepInputs
from vgraph.worker.kv_cache import allocate_kv_cache
from vgraph.worker.runner_output import to_host

CPU = torch.device("cpu")
HF = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}
# K and V of 2 layers x 16 tokens x 2 KV heads x 8 dims, float32
BLOCK_BYTES = 2 * 2 * 16 * 2 * 8 * 4


def model_config() -> ModelConfig:
    return ModelConfig(model="tiny", hf_config=HF, dtype=torch.float32, max_model_len=128)


def never_profiled() -> int:
    raise AssertionError("the CUDA budget was asked for off CUDA")


@pytest.mark.parametrize(
    "cache, blocks",
    [
        (CacheConfig(cpu_kv_cache_bytes=10 * BLOCK_BYTES + 1), 10),
        (CacheConfig(num_gpu_blocks_override=3), 3),
    ],
)
def test_kv_cache_blocks_and_tensors(cache: CacheConfig, blocks: int) -> None:
    num, caches = allocate_kv_cache(
        model_config(), cache, TorchAttentionBackend, ["l0", "l1"], CPU, never_profiled
    )
    assert num == blocks
    assert list(caches) == ["l0", "l1"]
    for t in caches.values():  # one spare block beyond the usable ones: pad tokens' writes
        assert t.shape == (2, blocks + 1, 16, 2, 8) and t.dtype == torch.float32
        assert not t.any()
    assert caches["l0"].data_ptr() != caches["l1"].data_ptr()


def test_kv_cache_too_small_for_one_block_names_the_settings() -> None:
    with pytest.raises(ValueError, match="cpu_kv_cache_bytes"):
        allocate_kv_cache(
            model_config(),
            CacheConfig(cpu_kv_cache_bytes=BLOCK_BYTES - 1),
            TorchAttentionBackend,
            ["l0"],
            CPU,
            never_profiled,
        )


def request(rid: str, logprobs: int | None) -> Request:
    return Request(rid, [1, 2, 3], SamplingParams(logprobs=logprobs), frozenset())


def test_to_host_unpacks_each_requests_top_n() -> None:
    out = SamplerOutput(
        token_ids=torch.tensor([7, 50_000]),
        logprob_token_ids=torch.tensor([[7, 3, 7, 9], [50_000, 50_000, 1, 2]]),  # [R, 1 + 3]
        logprobs=torch.tensor([[-1.5, -0.5, -1.5, -2.0], [-0.25, -0.25, -3.0, -4.0]]),
        ranks=torch.tensor([2, 1]),
    )
    got = to_host([request("a", 2), request("b", None)], out)
    assert got.sampled_token_ids == [7, 50_000]
    a, b = got.logprobs
    assert b is None
    assert a.token_ids == [7, 3, 7] and a.logprobs == [-1.5, -0.5, -1.5] and a.rank == 2
    assert got.prompt_logprobs == {}


def test_to_host_without_logprobs() -> None:
    out = SamplerOutput(torch.tensor([4, 5, 6]), None, None, None)
    got = to_host([request(r, None) for r in "abc"], out)
    assert got.sampled_token_ids == [4, 5, 6] and got.logprobs == [None] * 3


@pytest.mark.parametrize(
    "mode, key, padded",
    [
        (CUDAGraphMode.FULL, BatchDescriptor(8, 4, False), (8, 4)),  # the graph's counts
        (CUDAGraphMode.PIECEWISE, BatchDescriptor(8), (8, None)),  # pieces pad tokens only
        (CUDAGraphMode.NONE, None, (None, None)),  # eager: nothing padded
    ],
)
def test_tp_step_carries_the_inputs_and_the_dispatch(
    mode: CUDAGraphMode, key: BatchDescriptor | None, padded: tuple[int | None, int | None]
) -> None:
    reqs = [request("a", None), request("b", None)]
    reqs[0].num_computed_tokens = 3
    sched = SchedulerOutput(requests=reqs, num_scheduled_tokens=[1, 3], block_ids=[[4], [5, 6]])
    step = StepInputs(2, 4, 4, 8, 3, 4, False)
    ids = np.array([9, 1, 2, 3], dtype=np.int64)  # [num_tokens]
    msg = DECODER.decode(ENCODER.encode(build_tp_step(ids, sched, step, mode, key, 2)))
    assert isinstance(msg, TPStep)
    assert np.frombuffer(msg.token_ids, dtype=np.int64).tolist() == [9, 1, 2, 3]
    assert (msg.num_computed, msg.num_scheduled, msg.block_ids) == ([3, 0], [1, 3], [[4], [5, 6]])
    assert CUDAGraphMode[msg.mode] is mode and msg.num_common_prefix_blocks == 2
    assert (None if msg.key is None else BatchDescriptor(*msg.key)) == key
    assert (msg.num_tokens_padded, msg.num_reqs_padded) == padded

"""SamplingParams' own checks: a typed error that names the field, bounds that keep every value
safe for the wire and the sampler, vocabulary checks, and per-sample seeds of n > 1."""

from __future__ import annotations

import msgspec
import pytest

from vgraph.engine.protocol import EngineCoreRequest
from vgraph.sampling_params import (
    MAX_STOP_STRING_CHARS,
    MAX_STOP_TOKEN_IDS,
    SamplingParams,
    SamplingParamsError,
)

BAD = [
    ({"temperature": float("inf")}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": 10**400}, "temperature"),
    ({"top_p": float("nan")}, "top_p"),
    ({"top_k": 2**63}, "top_k"),
    ({"max_tokens": 2**64}, "max_tokens"),
    ({"min_tokens": True}, "min_tokens"),
    ({"seed": 2**63}, "seed"),
    ({"n": 0}, "n"),
    ({"stop": ["x"] * 17}, "stop"),
    ({"stop": ["x" * (MAX_STOP_STRING_CHARS + 1)]}, "stop"),
    ({"stop_token_ids": [True]}, "stop_token_ids"),
    ({"stop_token_ids": [2**64]}, "stop_token_ids"),
    ({"stop_token_ids": [1] * (MAX_STOP_TOKEN_IDS + 1)}, "stop_token_ids"),
    # the flags: a string or an int is no bool (msgspec would refuse it only in the engine core)
    ({"ignore_eos": "no"}, "ignore_eos"),
    ({"include_stop_str_in_output": 1}, "include_stop_str_in_output"),
    ({"skip_special_tokens": None}, "skip_special_tokens"),
    ({"structured_outputs": {"json": {}}}, "structured_outputs"),
]


@pytest.mark.parametrize(("kwargs", "field"), BAD, ids=[f"{k}" for k, _ in BAD])
def test_error_names_its_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(SamplingParamsError) as err:
        SamplingParams(**kwargs)
    assert err.value.field == field
    assert isinstance(err.value, ValueError)
    assert str(err.value).startswith(f"SamplingParams.{field}=")
    assert len(str(err.value)) < 300  # a long value is quoted by a short prefix only


def test_check_vocab_names_the_token_id() -> None:
    SamplingParams(stop_token_ids=[0, 99], logprobs=5).check_vocab(100)
    with pytest.raises(SamplingParamsError, match="stop_token_ids=100 .*0..99") as err:
        SamplingParams(stop_token_ids=[5, 100]).check_vocab(100)
    assert err.value.field == "stop_token_ids"
    with pytest.raises(SamplingParamsError) as err:
        SamplingParams(logprobs=20).check_vocab(8)
    assert err.value.field == "logprobs"


@pytest.mark.parametrize("seed", [0, 12345, 2**63 - 2, 2**63 - 1])
def test_child_seeds_stay_in_range_and_differ(seed: int) -> None:
    params = SamplingParams(seed=seed, n=4)
    seeds = [params.child(i).seed for i in range(4)]
    assert len(set(seeds)) == 4 and all(0 <= s < 2**63 for s in seeds)
    assert seeds[0] == seed and all(params.child(i).n == 1 for i in range(4))


def test_the_core_rechecks_on_decode() -> None:
    raw = msgspec.msgpack.encode(["r", [1], {"temperature": 1e400}, [2]])
    with pytest.raises(msgspec.ValidationError, match="temperature"):
        msgspec.msgpack.decode(raw, type=EngineCoreRequest)


def test_top_k_zero_means_all_tokens(tmp_path) -> None:
    """vLLM reads top_k 0 as "all tokens", and generation configs (e.g. Qwen-1_8B's) carry it."""
    from vgraph.entrypoints.generation_config import load_sampling_defaults

    assert SamplingParams(top_k=0).top_k == -1
    (tmp_path / "generation_config.json").write_text('{"top_k": 0, "temperature": 0.7}')
    defaults = load_sampling_defaults(tmp_path)
    assert SamplingParams(**defaults).top_k == -1

"""vLLM's request fields the OpenAI protocol models know but vgraph serves only in part:
cache_salt (checked by vLLM's rule, then carried), use_beam_search (false only) and priority
(0 only): each is a known field, never an ignored one, and a value vgraph cannot honour is a 400
naming it, raised by parse() + check_unsupported() before anything reaches the engine."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from vgraph.engine.protocol import EngineCoreRequest
from vgraph.entrypoints.openai.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    SamplingRequest,
    ignored_fields,
)
from vgraph.entrypoints.openai.server import parse
from vgraph.sampling_params import SamplingParams

COMPLETION = {"prompt": [1, 2, 3]}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}
MODELS = [(CompletionRequest, COMPLETION), (ChatCompletionRequest, CHAT)]
MODEL_IDS = ["completions", "chat"]


def checked(model: type[SamplingRequest], body: dict[str, Any]) -> SamplingRequest:
    req = parse(model, body)
    req.check_unsupported()
    return req


@pytest.mark.parametrize(("model", "base"), MODELS, ids=MODEL_IDS)
@pytest.mark.parametrize(
    "extra",
    [
        {"cache_salt": "tenantA"},
        {"cache_salt": "x" * 128},
        {"cache_salt": None},
        {"use_beam_search": False},
        {"use_beam_search": None},
        {"priority": 0},
        {"priority": "0"},
        {"priority": None},
    ],
)
def test_neutral_values_are_known_fields_and_accepted(
    model: type[SamplingRequest], base: dict[str, Any], extra: dict[str, Any]
) -> None:
    req = checked(model, {**base, **extra})
    assert ignored_fields(req) == []  # known: no "ignored unknown request fields" line
    assert req.priority == 0 and req.use_beam_search is False
    assert req.cache_salt == extra.get("cache_salt")


BAD = [
    ({"cache_salt": ""}, "cache_salt", "must be a non-empty string"),
    ({"cache_salt": "x" * 129}, "cache_salt", "at most 128 characters"),
    ({"cache_salt": "tenant/a"}, "cache_salt", "must not contain"),
    ({"cache_salt": "a@b"}, "cache_salt", "must not contain"),
    ({"cache_salt": "a\x00b"}, "cache_salt", "must not contain"),
    ({"cache_salt": 5}, "cache_salt", "valid string"),
    ({"use_beam_search": True}, "use_beam_search", "not supported: vgraph has no beam search"),
    ({"priority": 1}, "priority", "Got priority 1 but Priority scheduling is not enabled"),
    ({"priority": -3}, "priority", "Got priority -3 but Priority scheduling is not enabled"),
    ({"priority": "7"}, "priority", "Got priority 7 but"),
    ({"priority": 2**63}, "priority", "less than or equal"),
    ({"priority": True}, "priority", "not a boolean"),
]


@pytest.mark.parametrize(("model", "base"), MODELS, ids=MODEL_IDS)
@pytest.mark.parametrize(("extra", "param", "says"), BAD, ids=[str(b[0])[:30] for b in BAD])
def test_values_vgraph_cannot_honour_are_400_naming_the_field(
    model: type[SamplingRequest],
    base: dict[str, Any],
    extra: dict[str, Any],
    param: str,
    says: str,
) -> None:
    with pytest.raises(APIError) as err:
        checked(model, {**base, **extra})
    assert err.value.status == 400 and err.value.param == param
    assert says in err.value.message


def test_engine_request_carries_the_salt_and_old_messages_still_decode() -> None:
    params = SamplingParams(max_tokens=1)
    salted = EngineCoreRequest("r", [1, 2], params, [0], cache_salt="tenantA")
    raw = msgspec.msgpack.encode(salted)
    assert msgspec.msgpack.decode(raw, type=EngineCoreRequest).cache_salt == "tenantA"
    plain = msgspec.msgpack.encode(EngineCoreRequest("r", [1, 2], params, [0]))
    assert msgspec.msgpack.decode(plain, type=EngineCoreRequest).cache_salt is None

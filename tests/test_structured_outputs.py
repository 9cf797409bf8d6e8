"""Structured outputs without a model: StructuredOutputsParams' checks, grammars that do not parse
named as the field with xgrammar's reason, and the new SamplingParams fields' bounds."""

from __future__ import annotations

import msgspec
import pytest

from vgraph.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputsParams

xgr = pytest.importorskip("xgrammar")
from vgraph.structured_output.grammar import check_grammar  # noqa: E402


def test_exactly_one_constraint() -> None:
    with pytest.raises(SamplingParamsError, match="exactly one") as err:
        StructuredOutputsParams(regex="a", choice=["b"])
    assert err.value.field == "structured_outputs"
    with pytest.raises(SamplingParamsError):
        StructuredOutputsParams()
    so = StructuredOutputsParams(json={"type": "object"})
    assert so.json == '{"type": "object"}'  # a dict travels as its JSON text
    params = SamplingParams(structured_outputs=so)
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(params), type=SamplingParams)
    assert wire == params


@pytest.mark.parametrize(
    ("params", "field", "reason"),
    [
        (StructuredOutputsParams(json={"type": "nope"}), "structured_outputs.json", "nope"),
        (StructuredOutputsParams(json="[1, 2]"), "structured_outputs.json", "object"),
        (StructuredOutputsParams(json="{"), "structured_outputs.json", "Expecting"),
        (StructuredOutputsParams(regex="(a"), "structured_outputs.regex", "parenthesis"),
        (StructuredOutputsParams(grammar="root ::= x"), "structured_outputs.grammar", '"x"'),
    ],
)
def test_bad_grammar_names_field_and_reason(
    params: StructuredOutputsParams, field: str, reason: str
) -> None:
    with pytest.raises(SamplingParamsError) as err:
        check_grammar(params)
    assert err.value.field == field and reason in str(err.value)


def test_good_grammars_parse() -> None:
    for so in (
        StructuredOutputsParams(json_object=True),
        StructuredOutputsParams(choice=['say "hi"', "\\n", "ünï"]),
        StructuredOutputsParams(regex=r"\d{3}-[a-z]+"),
        StructuredOutputsParams(grammar='root ::= "a" root | "b"'),
    ):
        check_grammar(so)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": float("nan")}, "frequency_penalty"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"logit_bias": {1: 101.0}}, "logit_bias"),
        ({"logit_bias": {-1: 1.0}}, "logit_bias"),
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"bad_words": [""]}, "bad_words"),
        ({"prompt_logprobs": 21}, "prompt_logprobs"),
    ],
)
def test_new_fields_are_bounded(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(SamplingParamsError) as err:
        SamplingParams(**kwargs)
    assert err.value.field == field


def test_vocab_checks_cover_the_new_token_ids() -> None:
    for kwargs, field in (
        ({"logit_bias": {100: 1.0}}, "logit_bias"),
        ({"allowed_token_ids": [1, 100]}, "allowed_token_ids"),
        ({"bad_words_token_ids": [[1, 100]]}, "bad_words_token_ids"),
    ):
        with pytest.raises(SamplingParamsError) as err:
            SamplingParams(**kwargs).check_vocab(100)
        assert err.value.field == field

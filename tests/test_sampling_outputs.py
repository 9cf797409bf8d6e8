"""The frontend's OutputProcessor on hand-made engine outputs: how stop strings, EOS / stop token
ids and n > 1 children end up in RequestOutputs, including outputs that arrive after the frontend
already stopped a child (the engine core runs ahead of the frontend in its own process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vgraph.engine.output_processor import OutputKind, OutputProcessor
from vgraph.engine.protocol import EngineCoreOutput
from vgraph.sampling_params import SamplingParams

WORDS = " one two three four five six seven eight"


@pytest.fixture(scope="module")
def tok(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


def processor(
    tok: Any, params: SamplingParams, n_children: int = 1, kind: OutputKind = OutputKind.FINAL_ONLY
) -> OutputProcessor:
    proc = OutputProcessor(tok)
    ids = [f"{i}_r" for i in range(n_children)] if n_children > 1 else ["r"]
    proc.add_request("r", "prompt", tok.encode("Count:"), ids, [params] * n_children, kind)
    return proc


def feed(
    proc: OutputProcessor,
    rid: str,
    token: int,
    finish: str | None = None,
    stop_reason: int | None = None,
) -> tuple[list[Any], list[str]]:
    out = EngineCoreOutput(rid, [token], finish_reason=finish, stop_reason=stop_reason)
    return proc.process_outputs([out])


def test_late_outputs_of_a_child_stopped_by_a_stop_string_are_dropped(tok: Any) -> None:
    ids = tok.encode(WORDS, add_special_tokens=False)
    other = tok.encode(" eight seven six five four two", add_special_tokens=False)
    proc = processor(tok, SamplingParams(n=2, stop=[" three"]), n_children=2)
    aborts: list[str] = []
    for a, b in zip(ids[:3], other):  # " one two three": child 0 stops here
        aborts += feed(proc, "0_r", a)[1]
        aborts += feed(proc, "1_r", b)[1]
    assert aborts == ["0_r"]
    for a, b in zip(ids[3:5], other[3:5]):  # made by the core before the abort reached it
        assert feed(proc, "0_r", a) == ([], [])
        feed(proc, "1_r", b)
    results, _ = feed(proc, "1_r", other[5], finish="length")
    [ro] = results
    first, second = ro.outputs
    assert first.text == " one two" and first.finish_reason == "stop"
    assert first.stop_reason == " three" and first.token_ids == ids[:3]
    assert second.text == tok.decode(other[:6]) and second.finish_reason == "length"


def test_a_stop_string_on_the_last_step_still_reports_stop(tok: Any) -> None:
    ids = tok.encode(WORDS, add_special_tokens=False)[:3]
    proc = processor(tok, SamplingParams(stop=[" three"]))
    feed(proc, "r", ids[0])
    feed(proc, "r", ids[1])
    results, aborts = feed(proc, "r", ids[2], finish="length")  # max_tokens reached as well
    assert aborts == []  # the core has finished it already
    c = results[0].outputs[0]
    assert (c.text, c.finish_reason, c.stop_reason) == (" one two", "stop", " three")


@pytest.mark.parametrize("include", [False, True])
def test_the_stop_token_text_is_left_out_unless_asked(tok: Any, include: bool) -> None:
    ids = tok.encode(WORDS, add_special_tokens=False)[:3]
    params = SamplingParams(stop_token_ids=[ids[2]], include_stop_str_in_output=include)
    proc = processor(tok, params)
    feed(proc, "r", ids[0])
    feed(proc, "r", ids[1])
    c = feed(proc, "r", ids[2], finish="stop", stop_reason=ids[2])[0][0].outputs[0]
    assert c.token_ids == ids and c.stop_reason == ids[2]
    assert c.text == (" one two three" if include else " one two")


def test_deltas_hold_back_a_possible_stop_string(tok: Any) -> None:
    ids = tok.encode(WORDS, add_special_tokens=False)
    proc = processor(tok, SamplingParams(stop=[" four"]), kind=OutputKind.DELTA)
    deltas = []
    for t in ids:
        results, aborts = feed(proc, "r", t)
        deltas += [c.text for ro in results for c in ro.outputs]
        if aborts:
            break
    assert "".join(deltas) == " one two three"
    assert all(" four" not in "".join(deltas[: i + 1]) for i in range(len(deltas)))

"""Async scheduling (--async-scheduling): the engine core launches step N + 1 before step N's
tokens are back and feeds them to it on the device. The same tokens as synchronous scheduling
for the built-in default model with the engine core in its own process (chat prompts that stop
at EOS, so a request's last step is launched after its end; seeded sampling with logprobs); the
steps really overlap (a forward launched before the previous step's result is read);
penalties, min_tokens, logit_bias and allowed lists overlap with the same tokens; bad words,
structured outputs and prompt_logprobs, whose sampling waits for the previous step's tokens,
still overlap the forwards and give the same tokens; an abort while a step is in flight; and
`vgraph serve --async-scheduling` answers as the synchronous server does.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.serve_utils import ServerProcess
from vgraph import LLM, SamplingParams
from vgraph.engine.core import EngineCore
from vgraph.engine.protocol import EngineCoreRequest
from vgraph.models.default_model import ensure_default_model
from vgraph.sampling_params import StructuredOutputsParams
from vgraph.worker.runner_output import PendingOutput

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPTS = [
    "What is the capital of France? Answer in one word.",
    "Write a haiku about the sea.",
    "Hi",
    "List three prime numbers.",
    "Say yes.",
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=40)
SEEDED = SamplingParams(temperature=0.9, top_p=0.95, seed=11, max_tokens=12, logprobs=3)


def chats(llm: LLM) -> list[list[int]]:
    tok = llm.tokenizer
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": p}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for p in PROMPTS
    ]


def run(async_scheduling: bool, **kwargs) -> tuple[list, list]:
    llm = LLM(
        ensure_default_model(), max_model_len=1024, async_scheduling=async_scheduling, **kwargs
    )
    try:
        prompts = chats(llm)
        greedy = llm.generate(prompts, GREEDY, use_tqdm=False)
        seeded = llm.generate(prompts, SEEDED, use_tqdm=False)
    finally:
        llm.shutdown()
    return [o.outputs[0] for o in greedy], [o.outputs[0] for o in seeded]


@pytest.fixture(scope="module")
def sync_outputs() -> tuple[list, list]:
    return run(False)


def test_async_equals_sync_default_model_in_its_own_process(sync_outputs) -> None:
    greedy, seeded = run(True)  # the engine core in its own process (the default)
    sync_greedy, sync_seeded = sync_outputs
    assert [o.token_ids for o in greedy] == [o.token_ids for o in sync_greedy]
    assert [o.finish_reason for o in greedy] == [o.finish_reason for o in sync_greedy]
    assert "stop" in [o.finish_reason for o in greedy]  # some request ended at EOS
    assert [o.text for o in greedy] == [o.text for o in sync_greedy]
    assert [o.token_ids for o in seeded] == [o.token_ids for o in sync_seeded]
    for got, want in zip(seeded, sync_seeded):
        for lp, ref in zip(got.logprobs, want.logprobs):
            assert lp.keys() == ref.keys()
            for t in lp:
                assert lp[t].logprob == pytest.approx(ref[t].logprob, abs=1e-4)


class LaunchLog:
    """Records the order of the runner's forward launches ("L") and the waits for results
    ("R")."""

    def __init__(self, core: EngineCore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[str] = []
        launch, result = core.runner.launch_forward, PendingOutput.result

        def spy_launch(*args, **kwargs):
            self.events.append("L")
            return launch(*args, **kwargs)

        def spy_result(pending):
            self.events.append("R")
            return result(pending)

        monkeypatch.setattr(core.runner, "launch_forward", spy_launch)
        monkeypatch.setattr(PendingOutput, "result", spy_result)

    def overlapped(self) -> int:
        """Forwards launched while the previous step's result was not yet read."""
        n, waiting = 0, 0
        for e in self.events:
            if e == "L":
                n += waiting > 0
                waiting += 1
            else:
                waiting -= 1
        return n


def test_steps_overlap(sync_outputs, monkeypatch: pytest.MonkeyPatch) -> None:
    llm = LLM(ensure_default_model(), max_model_len=1024, async_scheduling=True, multiprocess=False)
    try:
        core = llm.engine.client.core
        log = LaunchLog(core, monkeypatch)
        greedy = llm.generate(chats(llm), GREEDY, use_tqdm=False)
        assert [o.outputs[0].token_ids for o in greedy] == [o.token_ids for o in sync_outputs[0]]
        assert log.overlapped() >= 30  # about one a step: 40 tokens, minus the first step
        assert core.scheduler.kv.num_free_blocks == core.scheduler.kv.num_blocks
    finally:
        llm.shutdown()


PROCESSORS = [
    SamplingParams(temperature=0.0, max_tokens=30, repetition_penalty=1.5),
    SamplingParams(temperature=0.0, max_tokens=30, frequency_penalty=1.5, presence_penalty=0.5),
    SamplingParams(temperature=0.0, max_tokens=30, min_tokens=24),  # EOS banned for 24 tokens
    SamplingParams(temperature=0.0, max_tokens=30, logit_bias={13: 5.0}),
    SamplingParams(temperature=0.7, seed=3, max_tokens=30, allowed_token_ids=list(range(300))),
]
# sampling that needs the previous step's tokens on the host: each step's sampling is launched
# once the step before has completed (its forward before)
HOST_TOKENS = [
    SamplingParams(temperature=0.0, max_tokens=30, bad_words=[" the", " a"]),
    SamplingParams(
        temperature=0.0,
        max_tokens=30,
        structured_outputs=StructuredOutputsParams(choice=["yes", "no"]),
    ),
    SamplingParams(temperature=0.0, max_tokens=30, prompt_logprobs=2),
    SamplingParams(temperature=0.0, max_tokens=30),
    SamplingParams(temperature=0.0, max_tokens=30, repetition_penalty=1.5),
]


def tokens_of(
    params: list[SamplingParams], async_scheduling: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[list, int]:
    llm = LLM(
        ensure_default_model(),
        max_model_len=1024,
        async_scheduling=async_scheduling,
        multiprocess=False,
    )
    try:
        log = LaunchLog(llm.engine.client.core, monkeypatch)
        outs = llm.generate(chats(llm), params, use_tqdm=False)
        return [(o.outputs[0].token_ids, o.outputs[0].text) for o in outs], log.overlapped()
    finally:
        llm.shutdown()


def test_penalties_bans_bias_and_allowed_lists_overlap_with_the_same_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine-level check: such requests' steps overlap and give the synchronous tokens
    (tests/test_logits_processors.py checks the pending output's count itself)."""
    sync, sync_overlapped = tokens_of(PROCESSORS, False, monkeypatch)
    got, overlapped = tokens_of(PROCESSORS, True, monkeypatch)
    assert sync_overlapped == 0 and overlapped >= 20
    assert got == sync
    assert len(got[2][0]) >= 24
    assert all(t < 300 for t in got[4][0])


def test_bad_words_structured_outputs_and_prompt_logprobs_sample_after_the_previous_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Their sampling waits for the previous step's tokens on the host, the forward does not:
    the steps still overlap, and every request gets the synchronous tokens."""
    sync, _ = tokens_of(HOST_TOKENS, False, monkeypatch)
    got, overlapped = tokens_of(HOST_TOKENS, True, monkeypatch)
    assert got == sync
    assert overlapped >= 20
    assert got[1][1] in ("yes", "no")
    assert " the" not in got[0][1] and " a " not in got[0][1]


def test_abort_while_a_step_is_in_flight(tiny_checkpoint) -> None:
    llm = LLM(str(tiny_checkpoint("llama")), async_scheduling=True, multiprocess=False)
    core: EngineCore = llm.engine.client.core
    try:
        params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
        for rid in ("a", "b"):
            core.add_request(EngineCoreRequest(rid, list(range(5, 25)), params, []))
        got: dict[str, list[int]] = {"a": [], "b": []}
        for _ in range(4):
            for out in core.step().outputs:
                got[out.request_id] += out.new_token_ids
        assert core.in_flight is not None and len(got["a"]) == 3  # the 4th step is in flight
        core.abort_requests(["a"])
        finished = {}
        while core.has_unfinished_requests():
            for out in core.step().outputs:
                got[out.request_id] += out.new_token_ids
                if out.finish_reason:
                    finished[out.request_id] = out.finish_reason
        assert len(got["a"]) == 3  # nothing of the aborted request after the abort
        assert len(got["b"]) == 20 and finished == {"b": "length"}
        assert core.scheduler.kv.num_free_blocks == core.scheduler.kv.num_blocks
    finally:
        llm.shutdown()


def test_serve_with_async_scheduling_answers_as_the_sync_server(
    server: ServerProcess, serve_model_dir: Path, tmp_path: Path
) -> None:
    body = {
        "model": server.model_name,
        "prompt": "The quick brown fox",
        "max_tokens": 24,
        "temperature": 0,
        "ignore_eos": True,
    }
    want = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()
    srv = ServerProcess(serve_model_dir, tmp_path, "--async-scheduling")
    try:
        srv.wait_healthy()
        got = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=60).json()
        assert got["choices"][0]["text"] == want["choices"][0]["text"]
        assert got["usage"]["completion_tokens"] == 24
        with httpx.stream(
            "POST", f"{srv.url}/v1/completions", json={**body, "stream": True}, timeout=60
        ) as r:
            chunks = [line for line in r.iter_lines() if line.startswith("data: {")]
        assert len(chunks) >= 2
    finally:
        srv.stop()

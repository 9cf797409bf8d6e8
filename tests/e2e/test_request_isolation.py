"""The engine core survives any one request: it re-checks every token id a request carries (the
frontend is not trusted), and a request that fails inside a step is finished with an error while
the others in the batch go on. A tiny random Llama, in process and in the core process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.tiny_models import make_tiny_model
from vgraph import LLM, SamplingParams
from vgraph.engine.core import EngineCore
from vgraph.engine.protocol import EngineCoreOutput, EngineCoreRequest
from vgraph.request import Request

KW = {"max_model_len": 128, "num_gpu_blocks_override": 64}
PROMPTS = [[5, 6, 7, 8], [100, 200, 300]]

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_tiny_model("llama", tmp_path_factory.mktemp("tiny-isolation")))


@pytest.fixture(scope="module", params=[False, True], ids=["sync", "async"])
def llm(model_dir: str, request: pytest.FixtureRequest) -> Iterator[LLM]:
    """With async scheduling too: a launch that raises completes the step in flight, then runs
    its own step synchronously, one request at a time."""
    llm = LLM(model_dir, multiprocess=False, async_scheduling=request.param, **KW)
    yield llm
    llm.shutdown()


def greedy(n: int = 5, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, **kw)


def run_to_end(core: EngineCore) -> dict[str, list[EngineCoreOutput]]:
    outs: dict[str, list[EngineCoreOutput]] = {}
    while core.has_unfinished_requests():
        for out in core.step().outputs:
            outs.setdefault(out.request_id, []).append(out)
    return outs


def tokens(outs: list[EngineCoreOutput]) -> list[int]:
    return [t for o in outs for t in o.new_token_ids]


@pytest.mark.parametrize(
    "stop_ids, eos, what",
    [([10**5], [2], "stop_token_ids"), ([0, None], [2], "stop_token_ids"), ([], [None], "EOS")],
    ids=["stop-id-1e5", "stop-id-vocab", "eos-id-vocab"],
)
def test_the_core_refuses_token_ids_outside_the_vocabulary(
    llm: LLM, stop_ids: list[int | None], eos: list[int | None], what: str
) -> None:
    """None stands for the vocabulary size, the first id outside it."""
    core = llm.engine.client.core
    vocab = llm.config.model_config.vocab_size
    params = greedy(min_tokens=1, stop_token_ids=[vocab if t is None else t for t in stop_ids])
    request = EngineCoreRequest("bad", [1, 2, 3], params, [vocab if t is None else t for t in eos])
    with pytest.raises(ValueError, match=what):
        core.add_request(request)
    assert not core.has_unfinished_requests()


def test_a_request_that_fails_in_a_step_ends_alone(llm: LLM) -> None:
    core = llm.engine.client.core
    vocab = llm.config.model_config.vocab_size
    for i, prompt in enumerate(PROMPTS):
        core.add_request(EngineCoreRequest(f"alone{i}", prompt, greedy(), [2]))
    expected = {rid: tokens(outs) for rid, outs in run_to_end(core).items()}

    for i, prompt in enumerate(PROMPTS):
        core.add_request(EngineCoreRequest(f"good{i}", prompt, greedy(), [2]))
    # past the core's own checks (as a bug in them would let it): its min-tokens ban indexes
    # the logits with a token id outside the vocabulary, which raises inside the step
    poison = SamplingParams(temperature=0.0, max_tokens=5, min_tokens=2, stop_token_ids=[vocab])
    core.scheduler.add_request(Request("poison", [9, 9, 9], poison, frozenset({2})))
    outs = run_to_end(core)

    (failed,) = outs["poison"]
    assert failed.finish_reason == "error" and "IndexError" in failed.error
    assert failed.new_token_ids == []
    for i in range(len(PROMPTS)):
        assert tokens(outs[f"good{i}"]) == expected[f"alone{i}"]
        assert outs[f"good{i}"][-1].finish_reason == "length"
    assert core.scheduler.kv.num_free_blocks == core.scheduler.kv.num_blocks
    # and the engine goes on serving
    assert len(llm.generate([PROMPTS[0]], greedy(3), use_tqdm=False)[0].outputs[0].token_ids) == 3


def test_a_step_where_every_request_fails_alone_is_the_engines_fault(
    llm: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = llm.engine.client.core

    def broken(sched: object) -> None:
        raise RuntimeError("device lost")

    monkeypatch.setattr(core.runner, "execute_model", broken)
    monkeypatch.setattr(core.runner, "launch_forward", broken)  # async scheduling's first call
    for i, prompt in enumerate(PROMPTS):
        core.add_request(EngineCoreRequest(f"doomed{i}", prompt, greedy(), [2]))
    with pytest.raises(RuntimeError, match="device lost"):
        core.step()
    core.abort_requests([f"doomed{i}" for i in range(len(PROMPTS))])


def test_the_core_process_refuses_a_bad_stop_token_id_and_lives(model_dir: str) -> None:
    llm = LLM(model_dir, **KW)  # the engine core in its own process
    try:
        client = llm.engine.client
        vocab = llm.config.model_config.vocab_size
        bad = SamplingParams(max_tokens=2, min_tokens=1, stop_token_ids=[vocab])
        client.add_request(EngineCoreRequest("bad", [1, 2], bad, [2]))  # past the frontend
        out = next(o for o in client.get_output().outputs if o.request_id == "bad")
        assert out.finish_reason == "error" and "stop_token_ids" in out.error
        out = llm.generate([[1, 2, 3]], greedy(3), use_tqdm=False)[0]
        assert len(out.outputs[0].token_ids) == 3 and out.error is None
    finally:
        llm.shutdown()

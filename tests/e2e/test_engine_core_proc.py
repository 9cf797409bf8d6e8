"""The engine core process: msgspec wire format, LLM through the process, per-request errors,
start-up errors, engine death (EngineDeadError, sync and async), aborts freeing blocks, cleanup."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import torch
import zmq

from tests.e2e.serve_utils import pid_alive, wait_until
from tests.tiny_models import make_tiny_model
from vgraph import LLM, SamplingParams
from vgraph.cudagraph.counters import GraphStats
from vgraph.engine.arg_utils import create_engine_config
from vgraph.engine.async_llm import AsyncLLM
from vgraph.engine.client import FAILURE_DECODER, EngineDeadError, InprocClient, MPClient
from vgraph.engine.core_proc import ENCODER, EngineCoreProc, failure
from vgraph.engine.protocol import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreOutputType,
    EngineCoreRequest,
    EngineCoreRequestType,
    SchedulerStats,
)
from vgraph.outputs import TokenLogprobs

KW = {"max_model_len": 256, "num_gpu_blocks_override": 256}
PROMPTS = [[5, 6, 7, 8], [100, 200, 300], [42] * 20]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")  # read by each spawned core at its torch import
        yield


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_tiny_model("llama", tmp_path_factory.mktemp("tiny-core-proc")))


@pytest.fixture(scope="module")
def mp_llm(model_dir: str) -> Iterator[LLM]:
    llm = LLM(model_dir, **KW)
    yield llm
    llm.shutdown()


def greedy(n: int = 6) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)


def test_wire_format_round_trip() -> None:
    req = EngineCoreRequest(
        "r1", [1, 2, 3], SamplingParams(temperature=0.5, stop=["x"], logprobs=2, seed=3), [2], 12.5
    )
    assert msgspec.msgpack.decode(ENCODER.encode(req), type=EngineCoreRequest) == req
    outs = EngineCoreOutputs(
        [EngineCoreOutput("r1", [9], [TokenLogprobs([9, 8], [-0.1, -2.0], 1)], "stop", "x")],
        SchedulerStats(
            num_running=1, kv_cache_usage=0.5, graph_stats=GraphStats(steps={"FULL": 3})
        ),
        1.0,
    )
    assert msgspec.msgpack.decode(ENCODER.encode(outs), type=EngineCoreOutputs) == outs
    bad = ENCODER.encode(["r2", [1], {"top_p": 0.0}, [2], 0.0])  # validated on decode
    with pytest.raises(msgspec.ValidationError, match="top_p"):
        msgspec.msgpack.decode(bad, type=EngineCoreRequest)


def test_llm_uses_the_process_and_matches_inproc(mp_llm: LLM, model_dir: str) -> None:
    client = mp_llm.engine.client
    assert isinstance(client, MPClient) and client.proc.is_alive()
    ipc_dir = Path(client.resources.ipc_dir)
    assert stat.S_IMODE(ipc_dir.stat().st_mode) == 0o700
    assert {p.name for p in ipc_dir.iterdir()} == {"handshake.sock", "input.sock", "output.sock"}
    got = [o.outputs[0].token_ids for o in mp_llm.generate(PROMPTS, greedy(), use_tqdm=False)]
    ref_llm = LLM(model_dir, multiprocess=False, **KW)
    assert isinstance(ref_llm.engine.client, InprocClient)
    ref = [o.outputs[0].token_ids for o in ref_llm.generate(PROMPTS, greedy(), use_tqdm=False)]
    assert got == ref and all(len(t) == 6 for t in got)
    assert client.call_utility("ping") == "pong"
    stats = client.call_utility("get_stats")
    assert stats["num_running"] == 0 and stats["kv_cache_usage"] == 0.0


def test_csrc_backend_in_the_engine_process(model_dir: str) -> None:
    """The engine core process loads vgraph._C itself (it used to be loaded in the parent only,
    and the first forward failed on a missing torch.ops.vgraph_C op)."""
    from vgraph.attention.csrc_backend import CsrcAttentionBackend

    why_not = CsrcAttentionBackend.is_available(torch.device("cpu"))
    if why_not:
        pytest.skip(why_not)
    llm = LLM(model_dir, attention_backend="csrc", **KW)
    try:
        assert isinstance(llm.engine.client, MPClient)
        got = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, greedy(), use_tqdm=False)]
    finally:
        llm.shutdown()
    ref_llm = LLM(model_dir, multiprocess=False, attention_backend="torch", **KW)
    ref = [o.outputs[0].token_ids for o in ref_llm.generate(PROMPTS, greedy(), use_tqdm=False)]
    assert got == ref and all(len(t) == 6 for t in got)


def test_env_switch_runs_in_process(model_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VGRAPH_ENABLE_MULTIPROCESSING", "0")
    assert isinstance(LLM(model_dir, **KW).engine.client, InprocClient)


def test_bad_request_ends_only_itself(mp_llm: LLM) -> None:
    client = mp_llm.engine.client
    client.add_request(EngineCoreRequest("bad", [10**6], greedy(), [2]))  # out of vocabulary
    client.input_socket.send_multipart([bytes([EngineCoreRequestType.ADD]), b"\x93garbage"])
    client.input_socket.send_multipart(
        [bytes([EngineCoreRequestType.ADD]), ENCODER.encode(["bad2", [1], {"n": 0}, [], 0.0])]
    )
    errors = {}
    while len(errors) < 2:
        for out in client.get_output().outputs:
            errors[out.request_id] = out
    assert errors["bad"].finish_reason == "error" and "vocabulary" in errors["bad"].error
    assert errors["bad2"].finish_reason == "error" and "SamplingParams.n" in errors["bad2"].error
    out = mp_llm.generate([[1, 2, 3]], greedy(3), use_tqdm=False)[0]  # still serving
    assert len(out.outputs[0].token_ids) == 3 and out.error is None


def test_startup_error_is_raised_with_its_message(model_dir: str) -> None:
    with pytest.raises(ValueError, match="no memory is left for the KV cache"):
        LLM(model_dir, max_model_len=256, cpu_kv_cache_bytes=1)


def test_failure_says_whether_it_was_the_users_mistake() -> None:
    class BadFlagError(ValueError):  # a typed user error counts, whatever its class is named
        pass

    cases = [(BadFlagError("b"), True), (ValueError("v"), True), (RuntimeError("r"), False)]
    cases.append((KeyError("k"), False))
    for error, user_error in cases:
        fail = FAILURE_DECODER.decode(ENCODER.encode(failure(error)))
        assert fail.user_error is user_error, error
        assert fail.error_type == type(error).__name__ and fail.message == str(error)


def test_engine_death_raises_engine_dead_error(model_dir: str) -> None:
    llm = LLM(model_dir, **KW)
    engine, client = llm.engine, llm.engine.client
    engine.add_request(
        "a", [1, 2, 3], SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
    )
    assert engine.step() is not None  # generating
    ipc_dir = client.resources.ipc_dir
    os.kill(client.proc.pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(EngineDeadError):
        while True:
            engine.step()
    assert time.monotonic() - t0 < 5
    with pytest.raises(EngineDeadError):
        llm.generate([[1, 2]], greedy(), use_tqdm=False)
    llm.shutdown()
    assert not Path(ipc_dir).exists()


def test_tcp_transport(model_dir: str) -> None:
    client = MPClient(create_engine_config(model_dir, **KW), transport="tcp")
    try:
        endpoint = client.input_socket.getsockopt_string(zmq.LAST_ENDPOINT)
        assert endpoint.startswith("tcp://127.0.0.1:") and client.resources.ipc_dir is None
        assert client.call_utility("ping") == "pong"
    finally:
        client.shutdown()
    assert client.proc.exitcode == 0


class FakeCore:
    """Just enough of EngineCore for the busy loop; step() fails on demand."""

    def __init__(self) -> None:
        self.waiting: list[str] = []

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting)

    def add_request(self, req: EngineCoreRequest) -> None:
        if req.request_id == "refuse":
            raise ValueError("refused")
        self.waiting.append(req.request_id)

    def abort_requests(self, ids: list[str]) -> None:
        self.waiting = [r for r in self.waiting if r not in ids]

    def stats(self) -> SchedulerStats:
        return SchedulerStats(num_waiting=len(self.waiting))

    def step(self) -> EngineCoreOutputs:
        raise RuntimeError("the step broke")


def test_busy_loop_reports_errors_and_death() -> None:
    ctx = zmq.Context()
    front_in, core_in = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    core_out, front_out = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    core_in.bind("inproc://in")
    front_in.connect("inproc://in")
    front_out.bind("inproc://out")
    core_out.connect("inproc://out")
    proc = EngineCoreProc(FakeCore(), core_in, core_out)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(proc.run()))
    thread.start()

    def send(kind: EngineCoreRequestType, msg: object) -> None:
        front_in.send_multipart([bytes([kind]), ENCODER.encode(msg)])

    send(EngineCoreRequestType.ADD, EngineCoreRequest("refuse", [1], greedy(), []))
    kind, payload = front_out.recv_multipart()
    out = msgspec.msgpack.decode(payload, type=EngineCoreOutputs).outputs[0]
    assert (out.request_id, out.finish_reason, out.error) == ("refuse", "error", "refused")
    send(EngineCoreRequestType.ADD, EngineCoreRequest("ok", [1], greedy(), []))
    kind, payload = front_out.recv_multipart()  # the step raised: a death notice, exit code 1
    assert kind[0] == EngineCoreOutputType.DEAD and b"the step broke" in payload
    thread.join(10)
    assert result == [1]
    ctx.destroy(linger=0)


def test_async_llm_abort_frees_blocks_and_death(model_dir: str) -> None:
    async def scenario() -> None:
        engine = AsyncLLM(create_engine_config(model_dir, **KW))
        try:
            params = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
            gen = engine.generate([1, 2, 3], params, "r")
            assert (await gen.__anext__()).outputs[0].token_ids
            await gen.aclose()  # the consumer went away: abort in the core
            for _ in range(200):
                stats = await engine.call_utility("get_stats")
                if stats["num_running"] == 0 and stats["kv_cache_usage"] == 0.0:
                    break
                await asyncio.sleep(0.05)
            assert stats["num_running"] == 0 and stats["kv_cache_usage"] == 0.0
            gens = [engine.generate([1, 2, i + 3], params, f"d{i}") for i in range(3)]
            for g in gens:
                await g.__anext__()
            os.kill(engine.client.proc.pid, signal.SIGKILL)
            t0 = time.monotonic()
            for g in gens:
                with pytest.raises(EngineDeadError):
                    async for _ in g:
                        pass
            assert time.monotonic() - t0 < 5 and engine.is_dead
            with pytest.raises(EngineDeadError):
                await engine.generate([1], params, "late").__anext__()
        finally:
            engine.shutdown()

    asyncio.run(scenario())


class FinishedEvent:
    """A stat logger that sets an event once the output handler has seen a request finish."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def record(self, scheduler_stats: object, iteration: object) -> None:
        if iteration.finish_reasons:
            self.event.set()


def test_a_consumer_that_falls_behind_gets_the_tokens_merged(model_dir: str) -> None:
    """Through the engine core process: a stream not read until its request has finished in the
    handler gets the rest in one output, with the same tokens and text as one read eagerly."""

    def tokens_and_text(outs: list) -> tuple[list[int], str]:
        comps = [c for o in outs for c in o.outputs]
        return [t for c in comps for t in c.token_ids], "".join(c.text for c in comps)

    async def scenario() -> None:
        engine = AsyncLLM(create_engine_config(model_dir, **KW))
        try:
            params = greedy(24)
            eager = [o async for o in engine.generate([5, 6, 7, 8], params, "eager")]
            assert len(eager) >= 12  # one output a step (or close to it) while read at once
            finished = FinishedEvent()
            engine.stat_loggers.append(finished)
            gen = engine.generate([5, 6, 7, 8], params, "late")
            first = await gen.__anext__()
            await asyncio.wait_for(finished.event.wait(), 120)
            rest = [o async for o in gen]
            assert len(rest) == 1 and rest[0].finished
            assert rest[0].outputs[0].finish_reason == "length"
            assert tokens_and_text([first, *rest]) == tokens_and_text(eager)
            assert len(tokens_and_text(eager)[0]) == 24
        finally:
            engine.shutdown()

    asyncio.run(scenario())


class FakeAsyncClient:
    """The AsyncMPClient interface over a scripted core: every request gets one token a step."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.aborted: list[str] = []

    def add_request(self, req: EngineCoreRequest) -> None:
        self.live[req.request_id] = req.sampling_params.max_tokens

    def abort_requests(self, ids: list[str]) -> None:
        self.aborted += ids
        for rid in ids:
            self.live.pop(rid, None)

    async def get_output_async(self) -> EngineCoreOutputs:
        while not self.live:
            await asyncio.sleep(0.001)
        outs = []
        for rid in list(self.live):
            self.live[rid] -= 1
            done = self.live[rid] == 0
            outs.append(EngineCoreOutput(rid, [7], finish_reason="length" if done else None))
            if done:
                del self.live[rid]
        return EngineCoreOutputs(outs, SchedulerStats(num_running=len(self.live)))

    def shutdown(self) -> None:
        pass


def test_output_processing_failure_ends_only_its_request(model_dir: str) -> None:
    async def scenario() -> None:
        client = FakeAsyncClient()
        engine = AsyncLLM(create_engine_config(model_dir, **KW), client=client)
        update = engine.output_processor._update_child

        def flaky(child, out):  # a detokenizer that breaks on one request
            if child.request_id.startswith("boom-"):
                raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad byte")
            return update(child, out)

        engine.output_processor._update_child = flaky
        params = SamplingParams(temperature=0, max_tokens=5)

        async def collect(rid: str) -> list[int]:
            return [
                t
                for o in [o async for o in engine.generate([1, 2], params, rid)]
                for c in o.outputs
                for t in c.token_ids
            ]

        boom, fine = await asyncio.gather(collect("boom"), collect("fine"), return_exceptions=True)
        assert isinstance(boom, RuntimeError) and "output processing failed" in str(boom)
        assert fine == [7] * 5
        assert [rid.rsplit("-", 1)[0] for rid in client.aborted] == ["boom"]
        assert not engine.is_dead
        engine.shutdown()

    asyncio.run(scenario())


class LateOutputClient(FakeAsyncClient):
    """A scripted core whose aborted requests send one more token (8) with the next step's
    outputs, as a real core's step that ran while the abort was on its way does."""

    def __init__(self) -> None:
        super().__init__()
        self.late: list[EngineCoreOutput] = []

    def abort_requests(self, ids: list[str]) -> None:
        self.late += [EngineCoreOutput(rid, [8]) for rid in ids if rid in self.live]
        super().abort_requests(ids)

    async def get_output_async(self) -> EngineCoreOutputs:
        await asyncio.sleep(0)  # a step's time: the consumers may run between steps
        outs = await super().get_output_async()
        outs.outputs[:0], self.late = self.late, []
        return outs


def test_a_reused_request_id_gets_only_its_own_tokens(model_dir: str) -> None:
    """A user request id reused right after its abort (a client's retry with its X-Request-Id):
    closing generate() aborts at once, so the id is free, and the retry names new engine
    requests, so the aborted ones' late outputs reach no one."""

    async def scenario() -> None:
        client = LateOutputClient()
        engine = AsyncLLM(create_engine_config(model_dir, **KW), client=client)
        try:
            long = SamplingParams(temperature=0, max_tokens=200)
            first = engine.generate([1, 2], long, "retry")
            assert not (await first.__anext__()).finished
            await first.aclose()
            params = SamplingParams(temperature=0, max_tokens=5)
            outs = [o async for o in engine.generate([1, 2], params, "retry")]
            assert [t for o in outs for c in o.outputs for t in c.token_ids] == [7] * 5
            assert len(client.aborted) == 1 and client.aborted[0].startswith("retry-")
            assert outs[-1].request_id == "retry" and outs[-1].finished
        finally:
            engine.shutdown()

    asyncio.run(scenario())


ORPHAN_SCRIPT = """
import sys, time
from vgraph.engine.arg_utils import create_engine_config
from vgraph.engine.client import MPClient
if __name__ == "__main__":
    client = MPClient(create_engine_config(sys.argv[1], max_model_len=256,
                                          num_gpu_blocks_override=64))
    print(client.proc.pid, client.resources.ipc_dir, flush=True)
    time.sleep(600)
"""


def test_core_exits_when_its_frontend_is_killed(model_dir: str, tmp_path: Path) -> None:
    script = tmp_path / "frontend.py"
    script.write_text(ORPHAN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    front = subprocess.Popen(
        [sys.executable, str(script), model_dir], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        core_pid, ipc_dir = front.stdout.readline().split()
        os.kill(front.pid, signal.SIGKILL)  # no shutdown message, no cleanup by the frontend
        front.wait()
        wait_until(lambda: not pid_alive(int(core_pid)), 15, "the orphaned core to exit")
        assert not Path(ipc_dir).exists()
    finally:
        front.kill()
        front.wait()


GRAPHS_SCRIPT = """
import sys
from vgraph import LLM, SamplingParams
if __name__ == "__main__":
    llm = LLM(sys.argv[1], max_model_len=256, num_gpu_blocks_override=64,
              compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY",
                                  "cudagraph_capture_sizes": [1, 2]})
    out = llm.generate([1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    print(len(out[0].outputs[0].token_ids))
"""


def test_a_script_that_captured_graphs_exits_cleanly(model_dir: str, tmp_path: Path) -> None:
    """The core's progress bars (graph capture) leave no multiprocessing semaphore behind for
    the resource tracker to warn about at exit."""
    script = tmp_path / "graphs.py"
    script.write_text(GRAPHS_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, str(script), model_dir],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.split() == ["2"], done.stderr
    assert "Capturing graphs" in done.stderr  # the bar this is about was drawn
    assert "leaked" not in done.stderr, done.stderr

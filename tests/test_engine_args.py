"""EngineArgs is the one declaration of every engine argument: the `vgraph serve` parser, the
LLM(...) keywords and the config builder follow it. Also: vLLM's compilation-config spellings
(-O levels, dotted -cc, mode/level/backend/full_cuda_graph), a YAML --config, and Hub ids
resolved from a (fake) Hugging Face cache. No model is loaded: configs only."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
from pathlib import Path

import pytest
import torch

from tests.hub_cache import add_to_cache
from vgraph.config import ATTENTION_OP, CUDAGraphMode
from vgraph.config.compilation_keys import translate_vllm_keys
from vgraph.engine.arg_utils import create_engine_config, resolve_async_scheduling
from vgraph.engine.engine_args import EngineArgs
from vgraph.entrypoints.cli import make_parser
from vgraph.entrypoints.cli_args import (
    FrontendArgs,
    engine_args_from,
    expand_argv,
    frontend_args_from,
)


def parse(*argv: str) -> EngineArgs:
    args = ["serve", *argv]
    return engine_args_from(make_parser(args).parse_args(args))


def test_every_engine_argument_is_a_flag_with_the_same_default() -> None:
    parser = make_parser(["serve"])
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    by_dest = {a.dest: a for a in serve._actions}
    for cls in (EngineArgs, FrontendArgs):
        for f in dataclasses.fields(cls):
            assert f.name in by_dest, f.name
            assert f.metadata["help"].split("(")[0].strip() in by_dest[f.name].help
    assert parse() == EngineArgs()  # no flag: exactly the dataclass defaults
    assert vars(parse("--max-num-seqs", "7", "-tp", "1")) == vars(
        EngineArgs(max_num_seqs=7, tensor_parallel_size=1)
    )


def test_llm_keywords_are_the_engine_args() -> None:
    from vgraph.entrypoints.llm import LLM

    assert "EngineArgs" in (LLM.__doc__ or "")
    assert list(inspect.signature(LLM.__init__).parameters)[-1] == "kwargs"
    with pytest.raises(ValueError, match=r"unknown engine argument\(s\) \['max_num_seq'\]"):
        create_engine_config("SmolLM2-135M", max_num_seq=4)


def test_async_scheduling_defaults_to_cuda_with_one_rank() -> None:
    assert parse().async_scheduling is None
    assert parse("--async-scheduling").async_scheduling is True
    assert parse("--no-async-scheduling").async_scheduling is False
    sched = create_engine_config("SmolLM2-135M", load_format="dummy").scheduler_config
    assert sched.async_scheduling is False  # the CPU: nothing to overlap
    on = create_engine_config("SmolLM2-135M", load_format="dummy", async_scheduling=True)
    assert on.scheduler_config.async_scheduling is True
    with pytest.raises(ValueError, match="async_scheduling=True is not supported with tensor"):
        create_engine_config(
            "SmolLM2-135M", load_format="dummy", async_scheduling=True, tensor_parallel_size=3
        )
    two = create_engine_config("SmolLM2-135M", load_format="dummy", tensor_parallel_size=3)
    assert two.scheduler_config.async_scheduling is False
    cuda = torch.device("cuda")  # the resolution alone: no device is touched
    assert resolve_async_scheduling(EngineArgs(), cuda) is True
    assert resolve_async_scheduling(EngineArgs(tensor_parallel_size=2), cuda) is False
    assert resolve_async_scheduling(EngineArgs(async_scheduling=False), cuda) is False


def test_positional_model_and_model_flag() -> None:
    assert parse("some/model").model == "some/model"
    assert parse("--model", "some/model").model == "some/model"
    with pytest.raises(ValueError, match="model given twice"):
        parse("a/b", "--model", "c/d")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-cc.cudagraph_mode=FULL"], {"cudagraph_mode": "FULL"}),
        (["-cc.cudagraph_capture_sizes=[1,2,4]"], {"cudagraph_capture_sizes": [1, 2, 4]}),
        (["--compilation-config.mode", "3"], {"mode": 3}),
        (["-cc", "3"], {"mode": 3}),  # vLLM's number alone: the mode
        (
            ['-cc={"cudagraph_mode": "PIECEWISE"}', "-cc.max_cudagraph_capture_size=64"],
            {"cudagraph_mode": "PIECEWISE", "max_cudagraph_capture_size": 64},
        ),
        (
            ["--compilation-config", '{"cudagraph_mode": "NONE"}', "-cc.cudagraph_mode=FULL"],
            {"cudagraph_mode": "FULL"},  # later wins, as in vLLM
        ),
    ],
)
def test_dotted_compilation_config(argv: list[str], expected: dict) -> None:
    assert parse(*argv).compilation_config == expected


@pytest.mark.parametrize(
    ("argv", "mode", "piecewise"),
    [
        (["-O0"], CUDAGraphMode.NONE, False),
        (["-O1"], CUDAGraphMode.PIECEWISE, True),
        (["-O2"], CUDAGraphMode.FULL_AND_PIECEWISE, True),
        (["-O", "3"], CUDAGraphMode.FULL_AND_PIECEWISE, True),
        (["--optimization-level", "2", "-cc.cudagraph_mode=FULL_DECODE_ONLY"], None, True),
        (["-O0", "-cc.cudagraph_mode=FULL_DECODE_ONLY"], CUDAGraphMode.FULL_DECODE_ONLY, False),
    ],
)
def test_optimization_levels(argv: list[str], mode: CUDAGraphMode | None, piecewise: bool) -> None:
    cc = parse(*argv).compilation()  # explicit keys win over the level's defaults
    assert cc.cudagraph_mode is (mode or CUDAGraphMode.FULL_DECODE_ONLY)
    assert cc.piecewise_available() is piecewise
    with pytest.raises(ValueError, match="optimization_level=4 is not allowed"):
        EngineArgs(optimization_level=4).compilation()


def test_compilation_config_as_a_number_is_the_mode() -> None:
    """vLLM's LLM(compilation_config=3)."""
    assert EngineArgs(compilation_config=3).compilation().piecewise_available()
    assert not EngineArgs(compilation_config=0).compilation().piecewise_available()
    with pytest.raises(ValueError, match="mode=2"):
        EngineArgs(compilation_config=2).compilation()


def test_vllm_compilation_keys(caplog: pytest.LogCaptureFixture) -> None:
    assert translate_vllm_keys({"level": 3, "mode": "VLLM_COMPILE"}) == {}
    assert translate_vllm_keys({"mode": 0}) == {"splitting_ops": []}
    assert translate_vllm_keys({"backend": "eager"}) == {"use_inductor": False}
    assert translate_vllm_keys({"compile_sizes": []}) == {}
    assert translate_vllm_keys({"splitting_ops": ["vllm::unified_attention_with_output"]}) == {
        "splitting_ops": [ATTENTION_OP]
    }
    with caplog.at_level(logging.WARNING):
        assert translate_vllm_keys({"full_cuda_graph": True}) == {
            "cudagraph_mode": "FULL_AND_PIECEWISE"
        }
    assert "full_cuda_graph is deprecated" in caplog.text
    for bad, words in (
        ({"mode": 1}, "mode=1 (stock torch.compile"),
        ({"level": 3, "mode": 0}, "level and mode disagree"),
        ({"compile_sizes": [1, 2]}, "compile_sizes=[1, 2] is not supported"),
        ({"backend": "cudagraphs"}, "backend='cudagraphs' is not allowed"),
        ({"pass_config": {"enable_fusion": True}}, "pass_config is not supported"),
        ({"full_cuda_graph": True, "cudagraph_mode": "PIECEWISE"}, "contradicts"),
    ):
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("[", r"\[")):
            translate_vllm_keys(bad)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("kv_cache_dtype", "fp8", "kv_cache_dtype='fp8' is not supported"),
        ("enable_chunked_prefill", False, "enable_chunked_prefill=False is not supported"),
        ("quantization", "awq", "quantization='awq' is not supported"),
        ("max_logprobs", 50, "max_logprobs=50 is not supported"),
    ],
)
def test_vllm_arguments_without_a_vgraph_feature_fail_naming_it(field, value, words) -> None:
    with pytest.raises(ValueError, match=words):
        EngineArgs(**{field: value}).check_unsupported()


def test_yaml_config_fills_the_same_arguments(tmp_path: Path) -> None:
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        "model: org/name\nmax-num-seqs: 8\nenforce_eager: true\nserved-model-name: [a, b]\n"
        "compilation-config: {cudagraph_mode: PIECEWISE}\nport: 9001\n"
    )
    args = ["serve", "--config", str(cfg), "--max-num-seqs", "16"]
    ns = make_parser(args).parse_args(args)
    ea = engine_args_from(ns)
    assert (ea.model, ea.max_num_seqs, ea.enforce_eager) == ("org/name", 16, True)  # CLI wins
    assert ea.served_model_name == ["a", "b"] and ns.port == 9001
    assert ea.compilation_config == {"cudagraph_mode": "PIECEWISE"}
    cfg.write_text("- not a mapping\n")
    with pytest.raises(ValueError, match="must hold a mapping"):
        expand_argv(["--config", str(cfg)])


def test_yaml_config_keeps_the_positional_model_and_every_false(tmp_path: Path) -> None:
    """A list-valued last key (api-key) must not take the positional MODEL as a value, and a
    false turns off any flag that has a --no- form (async scheduling's default is auto)."""
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        "max-model-len: 2048\nasync-scheduling: false\nenable-prefix-caching: false\n"
        "api-key: [k1]\n"
    )
    for args in (
        ["serve", "/models/m", "--config", str(cfg)],
        ["serve", "--config", str(cfg), "/models/m"],
    ):
        ns = make_parser(args).parse_args(args)
        ea = engine_args_from(ns)
        assert ea.model == "/models/m" and frontend_args_from(ns).api_key == ["k1"]
        assert ea.async_scheduling is False and ea.enable_prefix_caching is False
        assert ea.max_model_len == 2048


def test_hub_id_resolves_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    main = add_to_cache(tmp_path, "Qwen/Qwen3-0.6B")
    v2 = add_to_cache(
        tmp_path,
        "Qwen/Qwen3-0.6B",
        "v2",
        {**json.loads((main / "config.json").read_text()), "max_position_embeddings": 256},
    )
    config = create_engine_config("Qwen/Qwen3-0.6B", download_dir=str(tmp_path))
    assert config.model_config.model == str(main)
    assert config.model_config.name == "Qwen/Qwen3-0.6B"  # served under the id, as vLLM
    config = create_engine_config("Qwen/Qwen3-0.6B", download_dir=str(tmp_path), revision="v2")
    assert (config.model_config.model, config.model_config.max_model_len) == (str(v2), 256)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # the cache from the environment
    assert create_engine_config("Qwen/Qwen3-0.6B").model_config.model == str(main)


def test_hub_id_neither_cached_nor_reachable(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError) as e:
        create_engine_config("org/not-cached", download_dir=str(tmp_path))
    msg = str(e.value)
    assert "org/not-cached" in msg and str(tmp_path) in msg and "HF_HUB_OFFLINE" in msg
    with pytest.raises(ValueError, match="is not a folder nor a Hugging Face Hub id"):
        create_engine_config("no/such/folder")


def test_max_logprobs_caps_what_a_request_may_ask(tiny_checkpoint) -> None:
    from vgraph import SamplingParams
    from vgraph.entrypoints.llm import LLM

    llm = LLM(str(tiny_checkpoint("llama")), multiprocess=False, max_logprobs=2, max_model_len=64)
    try:
        assert llm.config.model_config.max_logprobs == 2
        with pytest.raises(ValueError, match=r"logprobs=3 is not allowed.*--max-logprobs"):
            llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2, logprobs=3), use_tqdm=False)
        out = llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2, logprobs=2), use_tqdm=False)
        assert len(out[0].outputs[0].token_ids) == 2
    finally:
        llm.shutdown()

"""Real `vllm serve` launch commands, with `vllm` replaced by `vgraph`, through the parser and the
config builder: each configures the engine as vLLM would, or fails with a message naming the
feature vgraph does not have. The commands come from vLLM's documentation (quickstart, OpenAI
server, optimization levels, CUDA graphs, torch.compile, CLI reference) and one user's command;
their Hub models resolve from a fake Hugging Face cache (tests/hub_cache.py), offline."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.hub_cache import add_to_cache, tiny_config
from vgraph.config import CUDAGraphMode
from vgraph.entrypoints.cli import make_parser
from vgraph.entrypoints.cli_args import engine_args_from, frontend_args_from

M = CUDAGraphMode
# command -> what the config (cfg.*) and the server args (srv.*) must be, or the error's words
COMMANDS: list[tuple[str, dict[str, Any] | str]] = [
    (
        "vllm serve Qwen/Qwen2.5-1.5B-Instruct",
        {"cfg.model_config.name": "Qwen/Qwen2.5-1.5B-Instruct"},
    ),
    (
        "vllm serve NousResearch/Meta-Llama-3-8B-Instruct --dtype auto --api-key token-abc123",
        {"srv.api_key": ["token-abc123"]},
    ),
    (
        "vllm serve meta-llama/Llama-3.2-1B-Instruct --dtype auto --max-model-len 4096 "
        "--trust-remote-code",
        {"cfg.model_config.max_model_len": 4096},
    ),
    (
        "vllm serve mistralai/Mistral-7B-v0.1 --gpu-memory-utilization 0.95 --max-model-len 8192",
        {"cfg.cache_config.gpu_memory_utilization": 0.95, "cfg.model_config.max_model_len": 8192},
    ),
    ("vllm serve meta-llama/Llama-3.2-1B-Instruct --host 0.0.0.0 --port 8080", {"srv.port": 8080}),
    (
        "vllm serve meta-llama/Llama-2-70b-hf --tensor-parallel-size 4",
        {"cfg.parallel_config.tensor_parallel_size": 4},
    ),
    ("vllm serve meta-llama/Llama-2-70b-hf -tp 2", {"cfg.parallel_config.tensor_parallel_size": 2}),
    (
        "vllm serve meta-llama/Llama-2-7b-hf --enable-prefix-caching",
        {"cfg.cache_config.enable_prefix_caching": True},
    ),
    ("vllm serve TheBloke/Llama-2-13B-AWQ --quantization awq", "quantization='awq'"),
    (
        "vllm serve meta-llama/Llama-3.1-8B-Instruct "
        """--compilation-config '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'""",
        {"cfg.compilation_config.cudagraph_mode": M.FULL_AND_PIECEWISE},
    ),
    (
        "vllm serve meta-llama/Llama-3.1-8B-Instruct "
        """--compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}'""",
        {"cfg.compilation_config.cudagraph_mode": M.FULL_DECODE_ONLY},
    ),
    (
        "vllm serve RedHatAI/Llama-3.2-1B-FP8 -O1",
        {"cfg.compilation_config.cudagraph_mode": M.PIECEWISE},
    ),
    ("vllm serve RedHatAI/Llama-3.2-1B-FP8 -O0", {"cfg.compilation_config.cudagraph_mode": M.NONE}),
    (
        "vllm serve meta-llama/Llama-3.2-1B -O3 -cc.cudagraph_capture_sizes=[1,2,4,8]",
        {
            "cfg.compilation_config.cudagraph_mode": M.FULL_AND_PIECEWISE,
            "cfg.compilation_config.cudagraph_capture_sizes": (1, 2, 4, 8),
        },
    ),
    (
        "vllm serve meta-llama/Llama-3.2-1B -cc.mode=3 -cc.cudagraph_mode=PIECEWISE "
        "-cc.max_cudagraph_capture_size=16",
        {"cfg.compilation_config.cudagraph_capture_sizes": (1, 2, 4, 8, 16)},
    ),
    (
        """vllm serve meta-llama/Llama-3.2-1B --compilation-config '{"compile_sizes": [1, 2]}'""",
        "compile_sizes=[1, 2] is not supported",
    ),
    (
        """vllm serve meta-llama/Llama-3.2-1B --compilation-config '{"level": 3, """
        """"full_cuda_graph": true}'""",
        {"cfg.compilation_config.cudagraph_mode": M.FULL_AND_PIECEWISE},
    ),
    (
        """vllm serve meta-llama/Llama-3.2-1B -cc '{"pass_config": {"enable_fusion": true}}'""",
        "pass_config is not supported",
    ),
    (  # debug_vllm_compile.md (vLLM <= 0.11): -O.KEY=VALUE is a compilation-config key
        "vllm serve meta-llama/Llama-3.2-1B -O.cudagraph_mode=NONE -O.backend=eager",
        {
            "cfg.compilation_config.cudagraph_mode": M.NONE,
            "cfg.compilation_config.use_inductor": False,
        },
    ),
    (  # --max-model-len and --max-num-batched-tokens take vLLM's human-readable integers
        "vllm serve Qwen/Qwen3-0.6B --max-model-len 32k --max-num-batched-tokens 4K",
        {
            "cfg.model_config.max_model_len": 32000,
            "cfg.scheduler_config.max_num_batched_tokens": 4096,
        },
    ),
    ("vllm serve Qwen/Qwen3-0.6B --kv-cache-dtype fp8", "kv_cache_dtype='fp8'"),
    (
        "vllm serve Qwen/Qwen3-0.6B --async-scheduling",
        {"cfg.scheduler_config.async_scheduling": True},
    ),
    ("vllm serve meta-llama/Llama-2-70b-hf -tp 2 --async-scheduling", "async_scheduling=True"),
    ("vllm serve Qwen/Qwen3-0.6B --no-enable-chunked-prefill", "enable_chunked_prefill"),
    (
        "vllm serve Qwen/Qwen3-0.6B --enable-chunked-prefill --max-num-batched-tokens 2048 "
        "--max-num-seqs 64 --generation-config vllm --no-enable-prefix-caching",
        {
            "cfg.scheduler_config.max_num_batched_tokens": 2048,
            "cfg.cache_config.enable_prefix_caching": False,
        },
    ),
    (
        "vllm serve Qwen/Qwen3-0.6B --served-model-name qwen3 qwen --max-logprobs 5 "
        "--disable-log-stats --enable-log-requests --disable-uvicorn-access-log "
        "--root-path /api --uvicorn-log-level trace --api-key a --api-key b",
        {
            "cfg.model_config.names": ("qwen3", "qwen"),
            "cfg.model_config.max_logprobs": 5,
            "srv.api_key": ["a", "b"],
            "srv.root_path": "/api",
            "srv.uvicorn_log_level": "trace",
        },
    ),
    (
        "vllm serve Qwen/Qwen3-0.6B --ssl-keyfile key.pem --ssl-certfile cert.pem "
        "--chat-template ./template.jinja --disable-log-requests",
        {"srv.ssl_certfile": "cert.pem", "srv.chat_template": "./template.jinja"},
    ),
    (
        "vllm serve ./merged --gpu-memory-utilization=0.8 --port 6002 "
        '--served-model-name="VLINSTRUCT" --trust-remote-code --max-model-len 8192 '
        "--disable-log-requests",
        {"cfg.model_config.name": "VLINSTRUCT", "srv.port": 6002},
    ),
    ("vllm serve --model Qwen/Qwen3-0.6B --revision main --seed 3", {"cfg.model_config.seed": 3}),
]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("hub")
    for cmd, _ in COMMANDS:
        model = shlex.split(cmd)[2] if not cmd.split()[2].startswith("-") else shlex.split(cmd)[3]
        if "/" in model and not model.startswith("."):
            add_to_cache(cache, model, config=tiny_config(max_position_embeddings=131072))
    return cache


@pytest.mark.parametrize(("command", "expected"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_vllm_launch_command(command, expected, hub, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "merged").mkdir()  # the local folder of the last command
    (tmp_path / "merged" / "config.json").write_text(
        json.dumps(tiny_config(max_position_embeddings=131072))
    )
    argv = shlex.split(command)
    assert argv[:2] == ["vllm", "serve"]
    argv = ["serve", *argv[2:]]
    ns = make_parser(argv).parse_args(argv)  # never "unrecognized arguments"
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected.replace("[", r"\[")):
            engine_args_from(ns).create_engine_config()
        return
    objects = {"cfg": engine_args_from(ns).create_engine_config(), "srv": frontend_args_from(ns)}
    for path, value in expected.items():
        root, *attrs = path.split(".")
        got = objects[root]
        for a in attrs:
            got = getattr(got, a)
        assert got == value, path

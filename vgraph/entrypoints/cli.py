"""The `vgraph` command: `vgraph serve [MODEL]` and `vgraph bench <name>`.

Bench subcommands are modules listed in BENCH_SUBCOMMANDS; each provides
`add_cli_args(parser)` and `main(args)` (an int return is the exit status), and its
docstring's first line is its help.
Add one by adding a line there. They are imported only for `vgraph bench ...`, so `vgraph serve`
starts without them. Arguments are checked (and --compilation-config parsed) before any model is
loaded; a bad value exits with status 2 and a message naming it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vgraph.config import VGraphConfig

from vgraph.attention.selector import backend_names  # loads no torch

BENCH_SUBCOMMANDS: dict[str, str] = {
    "serve": "vgraph.bench.serve",
    "latency": "vgraph.bench.latency",
    "sweep": "vgraph.bench.sweep",
}


def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        nargs="?",
        default=None,
        help="checkpoint folder or shipped config name (default: the built-in "
        "SmolLM2-135M-Instruct)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port to bind (default: %(default)s)")
    p.add_argument(
        "--api-key",
        default=os.environ.get("VGRAPH_API_KEY"),
        help="require `Authorization: Bearer KEY` on /v1/* (default: $VGRAPH_API_KEY;"
        " none: no auth)",
    )
    p.add_argument(
        "--served-model-name",
        default=None,
        help="model name in the API (default: the folder's name)",
    )
    p.add_argument(
        "--compilation-config",
        "-cc",
        default=None,
        metavar="JSON",
        help='graph-mode settings as a JSON object, e.g. \'{"cudagraph_mode": '
        '"FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1, 2, 4, 8]}\'',
    )
    p.add_argument(
        "--enforce-eager", action="store_true", help="never capture graphs (cudagraph_mode NONE)"
    )
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=256,
        help="most requests in one batch (default: %(default)s)",
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="context length limit (default: the model's)",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="token budget per engine step (default: 8192)",
    )
    p.add_argument(
        "--attention-backend",
        default="auto",
        help=f"auto or one of {', '.join(backend_names())} (default: %(default)s)",
    )
    p.add_argument(
        "--load-format", default="auto", help="auto, safetensors or dummy (random weights)"
    )
    p.add_argument("--dtype", default="auto", help="auto, float32, float16 or bfloat16")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the model's)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--block-size", type=int, default=16, help="KV cache block size (16 or 32)")
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="CUDA: fraction of device memory this engine may use, whatever else runs on the "
        "device (default: %(default)s)",
    )
    p.add_argument(
        "--cpu-kv-cache-bytes",
        type=int,
        default=1 << 30,
        help="CPU: KV cache size in bytes (default: 1 GiB)",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse the KV of cached prompt prefixes across requests (default: on)",
    )
    p.add_argument(
        "--enable-cascade-attention",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="cascade attention over a prefix shared by a decode batch (default: "
        "the measured default, off)",
    )
    p.add_argument(
        "--num-gpu-blocks-override",
        type=int,
        default=None,
        help="use exactly this many KV cache blocks",
    )
    p.add_argument(
        "-tp",
        "--tensor-parallel-size",
        type=_positive_int,
        default=1,
        help="ranks to split the model over, one process (and GPU) each (default: %(default)s)",
    )
    p.add_argument(
        "--max-request-body-bytes",
        type=int,
        default=1 << 20,
        help="larger request bodies get 413 (default: 1 MiB)",
    )
    p.add_argument(
        "--max-seqs-per-request",
        type=_positive_int,
        default=256,
        help="most sequences one request may ask for, prompts x n; more get 400 "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--engine-death-grace",
        type=float,
        default=5.0,
        help="if the engine core dies, seconds the server keeps answering 503 (so health checks "
        "see it) before it exits with status 1 (default: %(default)s)",
    )
    p.add_argument(
        "--graceful-shutdown-timeout",
        type=float,
        default=10.0,
        help="on SIGINT/SIGTERM, seconds in-flight requests may take to finish; requests still "
        "open then end with a 503 error (default: %(default)s)",
    )
    p.add_argument(
        "--uvicorn-log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
    )
    p.add_argument("--disable-access-log", action="store_true", help="no per-request log lines")
    p.add_argument(
        "--generation-config",
        default="auto",
        help="sampling defaults for what a request leaves out: auto (the model's "
        "generation_config.json), vllm (none) or a folder holding one (default: %(default)s)",
    )
    p.add_argument(
        "--tool-call-parser",
        default="auto",
        choices=["auto", "hermes", "llama3_json"],
        help="how tool calls are read from the output for tool_choice auto: hermes "
        "(<tool_call> JSON, Qwen), llama3_json, or auto (by architecture; default)",
    )
    p.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help="accepted for vLLM command lines; tool_choice auto is always served",
    )
    p.add_argument(
        "--enable-request-id-headers",
        action="store_true",
        help="echo X-Request-Id (or a fresh id) on every response",
    )
    p.add_argument(
        "--allowed-origins",
        type=_json_str_list,
        default=[],
        metavar="JSON",
        help="CORS origins as a JSON list, e.g. '[\"*\"]' (default: none, no cross-origin use)",
    )
    p.add_argument(
        "--allowed-methods",
        type=_json_str_list,
        default=["*"],
        metavar="JSON",
        help="CORS methods as a JSON list (default: all)",
    )
    p.add_argument(
        "--allowed-headers",
        type=_json_str_list,
        default=["*"],
        metavar="JSON",
        help="CORS headers as a JSON list (default: all)",
    )
    p.add_argument(
        "--allow-credentials", action="store_true", help="CORS: allow credentials (cookies)"
    )


def _json_str_list(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; use a JSON list of strings")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed; use an integer >= 1")
    return value


def make_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vgraph", description="vgraph: an LLM inference engine built around CUDA graph modes"
    )
    sub = parser.add_subparsers(dest="command", metavar="{serve,bench}")
    serve = sub.add_parser(
        "serve",
        help="start the OpenAI-compatible HTTP server",
        description="Start the OpenAI-compatible HTTP server (/v1/models, "
        "/v1/completions, /v1/chat/completions, /tokenize, /detokenize, /health, /ping, "
        "/version, /metrics).",
    )
    add_serve_args(serve)
    bench = sub.add_parser("bench", help=f"benchmarks: {', '.join(BENCH_SUBCOMMANDS)}")
    bench_sub = bench.add_subparsers(
        dest="bench_command", metavar="{" + ",".join(BENCH_SUBCOMMANDS) + "}"
    )
    if argv[:1] == ["bench"]:  # import the bench modules only when they are used
        for name, module_name in BENCH_SUBCOMMANDS.items():
            module = importlib.import_module(module_name)
            doc = (module.__doc__ or name).strip().splitlines()[0]
            p = bench_sub.add_parser(
                name,
                help=doc,
                description=module.__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
            module.add_cli_args(p)
            p.set_defaults(bench_main=module.main)
    return parser


def build_config(args: argparse.Namespace) -> VGraphConfig:
    """Parse --compilation-config first (no model touched), then resolve the whole config."""
    from vgraph.config import CompilationConfig
    from vgraph.engine.arg_utils import create_engine_config

    compilation = CompilationConfig.parse(args.compilation_config)
    return create_engine_config(
        args.model,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        load_format=args.load_format,
        seed=args.seed,
        tokenizer=args.tokenizer,
        served_model_name=args.served_model_name,
        device=args.device,
        attention_backend=args.attention_backend,
        block_size=args.block_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        cpu_kv_cache_bytes=args.cpu_kv_cache_bytes,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        compilation_config=compilation,
        enforce_eager=args.enforce_eager,
        tensor_parallel_size=args.tensor_parallel_size,
        enable_prefix_caching=args.enable_prefix_caching,
        enable_cascade_attention=args.enable_cascade_attention,
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM is handled as Ctrl-C: a clean, graceful exit


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(asctime)s %(name)s: %(message)s"
    )
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        config = build_config(args)
        from vgraph.entrypoints.openai.server import run_server

        return run_server(args, config)
    except ValueError as e:  # a bad flag or model, found by the config or the engine's start-up
        print(f"vgraph serve: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # run_server has stopped the engine core on its way out
        return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = make_parser(argv)
    args = parser.parse_args(argv)
    if args.command == "serve":
        rc = serve(args)
        # The engine core is stopped and its files removed: exit now rather than spend seconds
        # tearing down torch's and transformers' modules.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    if args.command == "bench" and getattr(args, "bench_main", None) is not None:
        rc = args.bench_main(args)
        return rc if isinstance(rc, int) else 0  # a bench main may return its report
    parser.print_help()
    return 1


if __name__ == "__main__":
    sys.exit(main())

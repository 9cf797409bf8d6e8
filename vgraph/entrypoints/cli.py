"""The `vgraph` command: `vgraph serve [MODEL]` and `vgraph bench <name>`.

Bench subcommands are modules listed in BENCH_SUBCOMMANDS; each provides
`add_cli_args(parser)` and `main(args)` (an int return is the exit status), and its
docstring's first line is its help.
Add one by adding a line there. They are imported only for `vgraph bench ...`, so `vgraph serve`
starts without them. `vgraph serve`'s flags are derived from FrontendArgs and EngineArgs
(cli_args.py); every command that takes engine arguments (serve, bench latency and throughput)
reads vLLM's spellings through FlexibleArgumentParser: --config YAML, dotted -cc./-O. keys.
Arguments are checked (and --compilation-config parsed) before any model is loaded; a bad value
exits with status 2 and a message naming it, as does a ValueError (a user's mistake, STYLE.md)
raised by a benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vgraph.config import VGraphConfig

import vgraph
from vgraph.entrypoints.cli_args import (
    FlexibleArgumentParser,
    add_serve_args,
    engine_args_from,
    frontend_args_from,
    non_default_args,
)

logger = logging.getLogger("vgraph.serve")

BENCH_SUBCOMMANDS: dict[str, str] = {
    "serve": "vgraph.bench.serve",
    "latency": "vgraph.bench.latency",
    "throughput": "vgraph.bench.throughput",
    "step": "vgraph.bench.step",
    "sweep": "vgraph.bench.sweep",
}


def make_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vgraph", description="vgraph: an LLM inference engine built around CUDA graph modes"
    )
    parser.add_argument("--version", action="version", version=f"vgraph {vgraph.__version__}")
    sub = parser.add_subparsers(
        dest="command", metavar="{serve,bench}", parser_class=FlexibleArgumentParser
    )
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
        dest="bench_command", metavar="{" + ",".join(BENCH_SUBCOMMANDS) + "}", required=True
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
    """The parsed flags -> EngineArgs -> the resolved config (--compilation-config is checked
    before the model is touched)."""
    return engine_args_from(args).create_engine_config()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM is handled as Ctrl-C: a clean, graceful exit


def serve(args: argparse.Namespace) -> int:
    """Check the flags, bind the port, then resolve the config (load the model) and serve."""
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(asctime)s %(name)s: %(message)s"
    )
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        engine_args = engine_args_from(args)
        frontend = frontend_args_from(args)
        engine_args.check_unsupported()
        engine_args.compilation()  # a bad -cc fails before the port or the model is touched
        changed = non_default_args(frontend, engine_args)
        logger.info("vgraph %s; non-default args: %s", vgraph.__version__, changed)
        from vgraph.entrypoints.openai.startup import bind_socket, check_startup_files

        check_startup_files(frontend.chat_template, engine_args.generation_config)

        try:
            sock = bind_socket(frontend.host, frontend.port)
        except OSError as e:
            print(
                f"vgraph serve: error: cannot bind {frontend.host}:{frontend.port}: "
                f"{e.strerror or e}; nothing was loaded",
                file=sys.stderr,
            )
            return 1
        config = engine_args.create_engine_config()
        from vgraph.entrypoints.openai.server import run_server

        return run_server(frontend, config, sock, log_stats=not engine_args.disable_log_stats)
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
        try:
            rc = args.bench_main(args)
        except ValueError as e:  # a bad engine argument or model, as `vgraph serve` reports it
            print(f"vgraph bench {args.bench_command}: error: {e}", file=sys.stderr)
            return 2
        return rc if isinstance(rc, int) else 0  # a bench main may return its report
    parser.print_help()
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""`vgraph serve`'s arguments: FrontendArgs (the HTTP server) + EngineArgs, both dataclasses, and
the argparse parser derived from their fields (one declaration per argument, vLLM's pattern).

Also what a vLLM command line may hold beyond plain flags (FlexibleArgumentParser, vLLM's name):
a YAML `--config FILE` (its keys are flag names; a flag on the command line wins, a list flag
included: its value replaces the file's), dotted compilation keys (`-cc.cudagraph_mode=FULL`,
`-O.mode=0`, `--compilation-config.cudagraph_capture_sizes=[1,2,4]`), several `-cc` values merged
in order, and human-readable integers (`--max-model-len 32k`). Imports no torch (the parser is
built before anything loads).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vgraph.engine.engine_args import EngineArgs, arg

UVICORN_LOG_LEVELS = ["critical", "error", "warning", "info", "debug", "trace"]


def json_str_list(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; use a JSON list of strings")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed; use an integer >= 1")
    return value


def port_number(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not allowed; use 0..65535 (0: any free port)")
    return value


def nonneg_seconds(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text} is not allowed; use a number of seconds >= 0")
    return value


_DECIMAL_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIXES = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(text: str) -> int:
    """vLLM's human-readable integers: 1k = 1000, 25.6k = 25600, 1m = 10**6 (decimal suffixes
    k m g t); 1K = 1024, 1M = 2**20 (binary suffixes K M G T, whole numbers only); or a plain
    integer."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", text.strip())
    if match is None:
        return int(text)
    number, suffix = match.groups()
    if suffix in _DECIMAL_SUFFIXES:
        return int(float(number) * _DECIMAL_SUFFIXES[suffix])
    if "." in number:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a binary suffix ({suffix}) takes a whole number; "
            f"did you mean {number}{suffix.lower()}?"
        )
    return int(number) * _BINARY_SUFFIXES[suffix]


# the engine arguments vLLM reads as human-readable integers (vLLM's EngineArgs, by name)
HUMAN_READABLE_INT_ARGS = frozenset({"max_model_len", "max_num_batched_tokens"})


@dataclass
class FrontendArgs:
    """The HTTP server's arguments (vLLM's FrontendArgs)."""

    host: str = arg("127.0.0.1", "address to bind")
    port: int = arg(
        8000,
        "port to bind, 0..65535 (0: any free port, logged once serving); bound before the model "
        "loads, so a busy port fails fast",
        type=port_number,
    )
    api_key: list[str] | None = arg(
        None,
        "require `Authorization: Bearer KEY` on /v1/*; several keys may be given (each one "
        "works); keys on the command line replace those of --config (default: $VGRAPH_API_KEY; "
        "none: no auth)",
        nargs="+",
        action="extend",
    )
    root_path: str | None = arg(None, "ASGI root_path, for a server behind a path-based proxy")
    ssl_keyfile: str | None = arg(None, "TLS private key file (serve https)")
    ssl_certfile: str | None = arg(None, "TLS certificate file (serve https)")
    chat_template: str | None = arg(
        None, "chat template (a Jinja file or the template itself) instead of the tokenizer's"
    )
    trust_request_chat_template: bool = arg(
        False, "let a chat or /tokenize request bring its own chat_template (a Jinja template)"
    )
    tool_call_parser: str = arg(
        "auto",
        "how tool calls are read from the output for tool_choice auto: hermes (<tool_call> JSON, "
        "Qwen), llama3_json, or auto (by architecture)",
        choices=["auto", "hermes", "llama3_json"],
    )
    enable_auto_tool_choice: bool = arg(
        False, "accepted for vLLM command lines; tool_choice auto is always served"
    )
    enable_request_id_headers: bool = arg(
        False, "echo X-Request-Id (or a fresh id) on every response"
    )
    allowed_origins: list[str] = arg(
        [],
        "CORS origins as a JSON list, e.g. '[\"*\"]' (default: none, no cross-origin use)",
        type=json_str_list,
        metavar="JSON",
    )
    allowed_methods: list[str] = arg(
        ["*"], "CORS methods as a JSON list", type=json_str_list, metavar="JSON"
    )
    allowed_headers: list[str] = arg(
        ["*"], "CORS headers as a JSON list", type=json_str_list, metavar="JSON"
    )
    allow_credentials: bool = arg(False, "CORS: allow credentials (cookies)")
    enable_log_requests: bool = arg(False, "log every request (id, prompt length, parameters)")
    disable_log_requests: bool = arg(False, "deprecated in vLLM: requests are not logged anyway")
    disable_uvicorn_access_log: bool = arg(
        False, "no per-request access log lines", flags=["--disable-access-log"]
    )
    uvicorn_log_level: str = arg("info", "uvicorn's log level", choices=UVICORN_LOG_LEVELS)
    max_request_body_bytes: int = arg(
        1 << 20, "larger request bodies get 413 (1 MiB)", type=positive_int
    )
    max_seqs_per_request: int = arg(
        256, "most sequences one request may ask for, prompts x n; more get 400", type=positive_int
    )
    engine_death_grace: float = arg(
        5.0,
        "if the engine core dies, seconds the server keeps answering 503 (so health checks see "
        "it) before it exits with status 1",
        type=nonneg_seconds,
    )
    graceful_shutdown_timeout: float = arg(
        10.0,
        "on SIGINT/SIGTERM, seconds in-flight requests may take to finish; requests still open "
        "then end with a 503 error",
        type=nonneg_seconds,
    )


def add_dataclass_args(
    parser: argparse.ArgumentParser, cls: type, title: str, positional: bool = True
) -> None:
    """One flag per field of cls: --field-name, its type, default and help from the field.
    positional=False: no positional model argument (the benchmarks take --model only). The engine
    arguments come with `--config YAML`, which FlexibleArgumentParser reads."""
    if cls is EngineArgs:
        parser.add_argument(
            "--config",
            metavar="YAML",
            default=None,
            help="a YAML file of flag names and values; a flag given on the command line wins "
            "(a list given there replaces the file's)",
        )
    group = parser.add_argument_group(title)
    for f in dataclasses.fields(cls):
        meta = dict(f.metadata)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        flags = [f"--{f.name.replace('_', '-')}", *meta.get("flags", [])]
        kw: dict[str, Any] = {"dest": f.name, "default": default}
        shown = "" if default is None or default is False else " (default: %(default)s)"
        readable = f.name in HUMAN_READABLE_INT_ARGS
        vllm_ints = "; 1k = 1000, 1K = 1024, as vLLM" if readable else ""
        kw["help"] = meta["help"].replace("%", "%%") + vllm_ints + shown
        base = _base_type(str(f.type))
        if meta.get("positional") and positional:
            group.add_argument(
                "model_tag", nargs="?", default=None, metavar=f.name, help=kw["help"]
            )
            kw["help"] += "; may also be given as the first argument"
        if base is bool:
            kw["action"] = argparse.BooleanOptionalAction if meta.get("negatable") else "store_true"
        elif f.name == "compilation_config":
            kw.update(action="append", default=None, type=str, metavar="JSON")
        else:
            kw["type"] = meta.get("type", human_readable_int if readable else base)
            for key in ("nargs", "choices", "action", "metavar"):
                if key in meta:
                    kw[key] = meta[key]
        group.add_argument(*flags, **kw)


_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "list[str]": str}


def _base_type(annotation: str) -> type:
    """ "int | None" -> int; "list[str] | None" -> str; a union of several -> str (parsed later)."""
    parts = [p.strip() for p in annotation.split("|") if p.strip() != "None"]
    return _TYPES.get(parts[0], str) if len(parts) == 1 else str


def add_serve_args(p: argparse.ArgumentParser) -> None:
    add_dataclass_args(p, FrontendArgs, "server")
    add_dataclass_args(p, EngineArgs, "engine")


class FlexibleArgumentParser(argparse.ArgumentParser):
    """vLLM's parser of that name. For a command that takes engine arguments (it has --config),
    the command line is rewritten before argparse reads it, with vLLM's precedence: the command
    line, then the --config file, then the defaults.

    1. Dotted compilation keys become one -cc JSON object each; --config becomes the file's flags
       (expand_argv).
    2. The file's flags go first (after a positional MODEL, which a list flag would otherwise
       take as one of its values), so a flag on the command line, coming later, overrides them.
    3. The command line is parsed alone too, and every argument it sets to a non-default value
       takes that value: so a list flag (--api-key, -cc) replaces the file's list instead of
       extending it, and a positional MODEL replaces the file's `model`.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if args is None or "--config" not in self._option_string_actions:  # argparse's table
            return super().parse_known_args(args, namespace)
        try:
            cli, from_file = expand_argv(list(args))
        except ValueError as e:
            self.error(str(e))
        if not from_file:
            return super().parse_known_args(cli, namespace)
        head = 1 if cli and not cli[0].startswith("-") else 0
        ns, extras = super().parse_known_args([*cli[:head], *from_file, *cli[head:]], namespace)
        alone, _ = super().parse_known_args(cli, None)
        defaults, _ = super().parse_known_args([], None)  # as argparse converts them
        for dest, value in vars(alone).items():
            if value != getattr(defaults, dest):
                setattr(ns, dest, value)
        if getattr(alone, "model_tag", None) is not None and alone.model is None:
            ns.model = None  # the positional MODEL is the command line's model
        return ns, extras


_DOTTED_PREFIXES = ("-cc.", "--compilation-config.", "-O.")  # -O.: vLLM's docs until v0.11


def expand_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """A command's arguments -> (them with each dotted compilation key as one -cc JSON object and
    --config FILE taken out, the file's flags). ValueError names a bad file or key."""
    out: list[str] = []
    from_file: list[str] | None = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--config" or a.startswith("--config="):
            if from_file is not None:
                raise ValueError("--config may be given once")
            path = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in a else 2
            from_file = yaml_args(path)
            continue
        prefix = next((p for p in _DOTTED_PREFIXES if a.startswith(p)), None)
        if prefix is not None:
            a = "-cc=" + json.dumps(_dotted(prefix, a[len(prefix) :], argv[i + 1 : i + 2]))
            if "=" not in argv[i]:
                i += 1  # `-cc.key value`
        out.append(a)
        i += 1
    return out, from_file or []


def _dotted(prefix: str, key_value: str, following: list[str]) -> dict[str, Any]:
    key, sep, value = key_value.partition("=")
    if not sep:
        if not following:
            raise ValueError(f"{prefix}{key} needs a value ({prefix}{key}=VALUE)")
        value = following[0]
    try:
        parsed: Any = json.loads(value)
    except json.JSONDecodeError:
        parsed = value  # a bare word: FULL, inductor
    for part in reversed(key.split(".")):
        parsed = {part: parsed}
    return parsed


def yaml_args(path: str) -> list[str]:
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"--config {path!r} cannot be read as YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path!r} must hold a mapping of flag names to values")
    negatable = _field_names(lambda meta: meta.get("negatable"))
    json_lists = _field_names(lambda meta: meta.get("type") is json_str_list)
    args: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        name = str(key).replace("-", "_")
        if value is True:
            args.append(flag)
        elif value is False:
            if name in negatable:  # else false is the default
                args.append("--no-" + flag[2:])
        elif isinstance(value, list):
            args += [flag, json.dumps(value)] if name in json_lists else [flag, *map(str, value)]
        elif isinstance(value, dict):
            args += [flag, json.dumps(value)]
        elif value is not None:
            args += [flag, str(value)]
    return args


def _field_names(has: Callable[[Any], Any]) -> set[str]:
    """The arguments whose field metadata passes has (a --no- form, a JSON-list type)."""
    return {
        f.name
        for cls in (EngineArgs, FrontendArgs)
        for f in dataclasses.fields(cls)
        if has(f.metadata)
    }


def _merge(into: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    for k, v in new.items():
        into[k] = (
            _merge(dict(into[k]), v) if isinstance(into.get(k), dict) and isinstance(v, dict) else v
        )
    return into


def engine_args_from(args: argparse.Namespace) -> EngineArgs:
    """The parsed namespace -> EngineArgs (positional or --model; -cc values merged)."""
    kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(EngineArgs)}
    tag = getattr(args, "model_tag", None)
    if tag is not None and kw["model"] is not None and tag != kw["model"]:
        raise ValueError(f"model given twice: {tag!r} (positional) and --model {kw['model']!r}")
    kw["model"] = kw["model"] or tag
    if kw["compilation_config"] is not None:
        merged: dict[str, Any] = {}
        for text in kw["compilation_config"]:
            from vgraph.config import CompilationConfig

            value = CompilationConfig.parse_json(text)
            if isinstance(value, int) and not isinstance(value, bool):
                value = {"mode": value}  # vLLM's `-cc 3`: the compilation mode alone
            if not isinstance(value, dict):
                raise ValueError(
                    f"compilation config must be a JSON object, got {type(value).__name__}"
                )
            merged = _merge(merged, value)
        kw["compilation_config"] = merged
    return EngineArgs(**kw)


def frontend_args_from(args: argparse.Namespace) -> FrontendArgs:
    kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(FrontendArgs)}
    if not kw["api_key"] and os.environ.get("VGRAPH_API_KEY"):
        kw["api_key"] = [os.environ["VGRAPH_API_KEY"]]
    return FrontendArgs(**kw)


def non_default_args(*objs: Any) -> dict[str, Any]:
    """The fields a user changed, for the start-up log."""
    out = {}
    for obj in objs:
        for f in dataclasses.fields(obj):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            value = getattr(obj, f.name)
            if value != default:
                out[f.name] = value if f.name != "api_key" else "***"
    return out

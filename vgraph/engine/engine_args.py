"""EngineArgs: every engine argument declared once (name, type, default, help), vLLM's pattern.

`vgraph serve`'s flags (vgraph/entrypoints/cli_args.py derives them from the fields and their
metadata), the keywords of `LLM(...)` and of create_engine_config, and a YAML `--config` file
all fill this one dataclass; `create_engine_config()` (vgraph/engine/arg_utils.py) turns it into
the frozen VGraphConfig. vLLM arguments naming features vgraph lacks are declared with vLLM's
names and defaults; any other value is a ValueError naming the feature (`check_unsupported`).
Imports no torch: the CLI parser is built from it before anything loads.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgraph.attention.selector import backend_names  # loads no torch
from vgraph.sampling_params import MAX_LOGPROBS

if TYPE_CHECKING:
    from vgraph.config import CompilationConfig, VGraphConfig

logger = logging.getLogger(__name__)


def arg(default: Any, help: str, **cli: Any) -> Any:
    """A field with its help; cli: flags (extra spellings, e.g. "-tp"), choices, nargs,
    negatable (adds --no-NAME), positional, metavar."""
    factory = isinstance(default, (list, dict))
    kw = {"default_factory": (lambda: type(default)(default))} if factory else {"default": default}
    return field(metadata={"help": help, **cli}, **kw)


@dataclass
class EngineArgs:
    """What `LLM(...)` and `vgraph serve` accept about the engine; help strings are the docs."""

    model: str | None = arg(
        None,
        "checkpoint folder, Hugging Face Hub id (org/name) or shipped config name "
        "(default: the built-in SmolLM2-135M-Instruct)",
        positional=True,
    )
    revision: str | None = arg(None, "Hub revision: branch, tag or commit (default: main)")
    download_dir: str | None = arg(None, "Hugging Face cache folder (default: $HF_HUB_CACHE)")
    trust_remote_code: bool = arg(
        False,
        "accepted for vLLM compatibility: vgraph runs only its own model code (vgraph/models), "
        "never a repository's Python files",
    )
    tokenizer: str | None = arg(
        None, "tokenizer folder or Hugging Face Hub id (default: the model's)"
    )
    served_model_name: list[str] | None = arg(
        None,
        "model name(s) in the API; the first is the one responses carry (default: the model "
        "id or folder name)",
        nargs="+",
    )
    dtype: str = arg("auto", "auto, float32, float16 or bfloat16")
    max_model_len: int | None = arg(None, "context length limit (default: the model's)")
    load_format: str = arg("auto", "auto, safetensors or dummy (random weights)")
    seed: int = arg(0, "random seed")
    device: str = arg("auto", "auto, cpu or cuda")
    attention_backend: str = arg("auto", f"auto or one of {', '.join(backend_names())}")
    block_size: int = arg(16, "KV cache block size (16 or 32)")
    gpu_memory_utilization: float = arg(
        0.9, "CUDA: fraction of device memory this engine may use, whatever else runs on it"
    )
    cpu_kv_cache_bytes: int = arg(1 << 30, "CPU: KV cache size in bytes (1 GiB)")
    num_gpu_blocks_override: int | None = arg(None, "use exactly this many KV cache blocks")
    quantization: str | None = arg(None, "weight quantization; vgraph loads unquantized weights")
    kv_cache_dtype: str = arg("auto", "KV cache dtype; vgraph stores it in the model dtype (auto)")
    max_num_seqs: int = arg(256, "most requests in one batch")
    max_num_batched_tokens: int | None = arg(None, "token budget per engine step (default: 8192)")
    enable_chunked_prefill: bool | None = arg(
        None,
        "vgraph always chunks prefills; --no-enable-chunked-prefill is an error",
        negatable=True,
    )
    async_scheduling: bool | None = arg(
        None,
        "schedule and launch each step while the previous one runs on the device, feeding it "
        "that step's tokens there (default: on with CUDA and tensor_parallel_size 1)",
        negatable=True,
    )
    enable_prefix_caching: bool = arg(
        True, "reuse the KV of cached prompt prefixes across requests", negatable=True
    )
    enable_cascade_attention: bool | None = arg(
        None,
        "cascade attention over a prefix shared by a decode batch (default: the measured "
        "default, off)",
        negatable=True,
    )
    tensor_parallel_size: int = arg(
        1, "ranks to split the model over, one process (and GPU) each", flags=["-tp"]
    )
    generation_config: str = arg(
        "auto",
        "sampling defaults for what a request leaves out: auto (the model's "
        "generation_config.json), vllm (none) or a folder holding one",
    )
    max_logprobs: int = arg(
        MAX_LOGPROBS, f"most logprobs a request may ask for (<= {MAX_LOGPROBS})"
    )
    compilation_config: dict[str, Any] | CompilationConfig | str | int | None = arg(
        None,
        'graph-mode settings: JSON (\'{"cudagraph_mode": "FULL_DECODE_ONLY"}\') or dotted '
        "(-cc.cudagraph_mode=FULL); vLLM's keys mode/level, backend, compile_sizes and "
        "full_cuda_graph are understood, and a number alone is the mode; may be given "
        "several times (merged)",
        flags=["-cc"],
        metavar="JSON",
    )
    optimization_level: int | None = arg(
        None,
        "vLLM's -O0..-O3: 0 no graphs, 1 PIECEWISE, 2 and 3 FULL_AND_PIECEWISE; explicit "
        "compilation-config keys win (default: the device's default mode)",
        flags=["-O"],
    )
    enforce_eager: bool = arg(False, "never capture graphs (cudagraph_mode NONE)")
    disable_log_stats: bool = arg(False, "no periodic stats line in the log")

    def create_engine_config(self) -> VGraphConfig:
        """Resolve every "auto" and build the frozen config. Raises ValueError on bad input."""
        from vgraph.engine.arg_utils import build_engine_config

        return build_engine_config(self)

    def compilation(self) -> CompilationConfig:
        """compilation_config (JSON, dict, or merged dicts from the CLI) with -O applied."""
        from vgraph.config import CompilationConfig
        from vgraph.config.compilation_keys import apply_optimization_level

        cc = self.compilation_config
        if isinstance(cc, CompilationConfig):
            if self.optimization_level is not None:
                raise ValueError(
                    "optimization_level cannot be combined with a CompilationConfig object; "
                    "pass compilation_config as a dict"
                )
            return CompilationConfig.parse(cc)  # one built by hand gets a dict's checks
        if isinstance(cc, str):
            cc = CompilationConfig.parse_json(cc)
        if isinstance(cc, int) and not isinstance(cc, bool):
            cc = {"mode": cc}  # vLLM's LLM(compilation_config=3): the compilation mode alone
        if cc is not None and not isinstance(cc, dict):
            return CompilationConfig.parse(cc)  # raises: not a JSON object
        return CompilationConfig.parse(apply_optimization_level(self.optimization_level, cc or {}))

    def served_names(self) -> tuple[str, ...]:
        names = self.served_model_name
        if isinstance(names, str):
            names = [names]
        if names:
            return tuple(names)
        if self.model and not Path(self.model).expanduser().is_dir() and "/" in self.model:
            return (self.model,)  # a Hub id: vLLM serves it under the id as given
        return ()

    def check_types(self) -> None:
        """Each argument of a plain type (int, float, bool, str, a list of str, or None where
        allowed) must have it: a ValueError naming the argument, not a TypeError from deep
        inside (LLM keywords and YAML files are not typed by argparse). A path given for a
        string (a pathlib.Path model folder) becomes its string."""
        for f in dataclasses.fields(self):
            kinds = [k.strip() for k in str(f.type).split("|")]
            if not all(k in _PLAIN_TYPES for k in kinds):
                continue  # compilation_config: parsed and checked by CompilationConfig
            value = getattr(self, f.name)
            if "str" in kinds and isinstance(value, os.PathLike):
                value = os.fspath(value)
                setattr(self, f.name, value)
            if not any(_PLAIN_TYPES[k][0](value) for k in kinds):
                allowed = " or ".join(_PLAIN_TYPES[k][1] for k in kinds)
                raise ValueError(f"{f.name}={value!r} is not allowed; use {allowed}")

    def check_unsupported(self) -> None:
        """vLLM arguments whose feature vgraph lacks: only their vLLM default (or off) works."""
        if self.trust_remote_code:
            logger.info(
                "trust_remote_code: accepted, but vgraph runs only its own model code "
                "(vgraph/models); nothing from the repository is executed"
            )
        cap = MAX_LOGPROBS
        problems = [
            ("quantization", self.quantization is not None, "vgraph loads unquantized weights"),
            ("kv_cache_dtype", self.kv_cache_dtype != "auto", "the KV cache is in the model dtype"),
            ("enable_chunked_prefill", self.enable_chunked_prefill is False, "it is always on"),
            ("max_logprobs", not 0 <= self.max_logprobs <= cap, f"use 0..{cap}"),
        ]
        for name, bad, why in problems:
            if bad:
                raise ValueError(f"{name}={getattr(self, name)!r} is not supported: {why}")


# an annotation's plain types: (accepts the value, what the error says is allowed)
_PLAIN_TYPES = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "list[str]": (
        lambda v: (
            isinstance(v, str)  # one name, as vLLM's LLM(served_model_name=...) takes
            or isinstance(v, (list, tuple))
            and all(isinstance(x, str) for x in v)
        ),
        "a string or a list of strings",
    ),
    "None": (lambda v: v is None, "None"),
}

ENGINE_ARG_NAMES = frozenset(f.name for f in dataclasses.fields(EngineArgs))

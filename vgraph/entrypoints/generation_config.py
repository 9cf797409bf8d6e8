"""The model's recommended sampling defaults, from its generation_config.json (vLLM's
--generation-config).

- "auto" (default): the model folder's generation_config.json;
- "vllm": none, vgraph's own defaults (temperature 1, top_p 1, ...);
- a folder: the generation_config.json in it.
Only sampling fields are read: temperature, top_p, top_k, min_p, repetition_penalty and
max_new_tokens (as max_tokens). A request (or the SamplingParams given to LLM.generate) that sets
a field wins; fields it leaves out take these. Fields SamplingParams does not have are skipped.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from vgraph.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

# generation_config.json name -> SamplingParams / request field
GENERATION_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_tokens",
}
GENERATION_CONFIG_MODES = ("auto", "vllm")


def load_sampling_defaults(
    model_dir: str | Path, generation_config: str = "auto"
) -> dict[str, Any]:
    """{SamplingParams field: value} recommended by the model (empty for "vllm" or none)."""
    if generation_config == "vllm":
        return {}
    folder = Path(model_dir if generation_config == "auto" else generation_config)
    if generation_config != "auto" and not folder.is_dir():
        raise ValueError(
            f"generation_config={generation_config!r} is not allowed; use auto, vllm or a folder "
            "holding generation_config.json"
        )
    path = folder / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    known = set(SamplingParams.__struct_fields__)
    defaults = {
        field: raw[name]
        for name, field in GENERATION_FIELDS.items()
        if raw.get(name) is not None and field in known
    }
    if defaults:
        try:  # a bad value is a start-up error naming the file and the field
            SamplingParams(**defaults)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        logger.info(
            "sampling defaults from %s (a request's own values win): %s; "
            "--generation-config vllm turns this off",
            path,
            defaults,
        )
    return defaults

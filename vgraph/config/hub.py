"""Hugging Face Hub model ids -> a local snapshot folder, through huggingface_hub.

The cache comes first (`models--org--name/snapshots/<commit>/`, the commit named by
`refs/<revision>`); a download is tried only when that fails and the network is allowed
(HF_HUB_OFFLINE unset). The error names the id, the revision and the cache folder, so a user
sees where vgraph looked. Imports nothing else from vgraph.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

# what an engine needs from a repository: config, weights, tokenizer, chat template
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_cache_dir(download_dir: str | None) -> str:
    if download_dir:
        return str(Path(download_dir).expanduser())
    from huggingface_hub import constants

    return os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE


def resolve_hub_model(
    model_id: str,
    revision: str | None,
    download_dir: str | None,
    what: str = "model",
    allow_patterns: list[str] | None = None,
) -> str:
    """The snapshot folder of model_id at revision (default main); ValueError if unreachable.
    what: the argument named in errors; allow_patterns: the files fetched (default: a model's)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    cache = hub_cache_dir(download_dir)
    kw = {
        "revision": revision,
        "cache_dir": cache,
        "allow_patterns": allow_patterns or ALLOW_PATTERNS,
    }
    try:
        return snapshot_download(model_id, local_files_only=True, **kw)
    except HFValidationError as e:
        raise ValueError(
            f"{what}={model_id!r} is neither a local folder nor a valid Hugging Face Hub id ({e})"
        ) from None
    except Exception as cached_error:  # noqa: BLE001 - not (fully) in the cache
        if hub_offline():
            raise ValueError(
                f"{what}={model_id!r} (revision {revision or 'main'}) is not in the Hugging Face "
                f"cache {cache} and HF_HUB_OFFLINE is set, so it cannot be downloaded "
                f"({type(cached_error).__name__})"
            ) from None
    logger.info("downloading %s (revision %s) into %s", model_id, revision or "main", cache)
    try:
        return snapshot_download(model_id, **kw)
    except Exception as e:  # noqa: BLE001 - network, auth, unknown repo or revision
        raise ValueError(
            f"{what}={model_id!r} (revision {revision or 'main'}) is not in the Hugging Face "
            f"cache {cache} and could not be downloaded: {type(e).__name__}: {str(e)[:300]}"
        ) from None

"""Fixtures of the serving tests: a tiny model with a real tokenizer, and one shared server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.serve_utils import ServerProcess
from tests.tiny_models import (
    TOOL_CHAT_TEMPLATE,
    TOOL_PIECES,
    make_scripted_model,
    make_tiny_model_with_tokenizer,
)


@pytest.fixture(scope="session")
def serve_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random Llama (vocab 49152) with the default model's tokenizer and chat template."""
    return make_tiny_model_with_tokenizer(tmp_path_factory.mktemp("tiny-serve-llama"))


@pytest.fixture(scope="session")
def server(
    serve_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One `vgraph serve` for every non-destructive serving test."""
    srv = ServerProcess(serve_model_dir, tmp_path_factory.mktemp("server"))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def tool_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny Qwen2 that answers every prompt with TOOL_PIECES (a Hermes tool call), then EOS;
    its chat template renders tools, tool calls and tool results; generation_config.json caps
    max_tokens at 6 (seen only when EOS is ignored: the answer is 4 tokens)."""
    import json

    folder = tmp_path_factory.mktemp("tiny-tool-qwen2")
    make_scripted_model(folder, TOOL_PIECES, TOOL_CHAT_TEMPLATE)
    (folder / "generation_config.json").write_text(json.dumps({"max_new_tokens": 6}))
    return folder

"""Fixtures of the serving tests: a tiny model with a real tokenizer, and one shared server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.serve_utils import ServerProcess
from tests.tiny_models import make_tiny_model_with_tokenizer


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

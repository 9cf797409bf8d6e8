"""The compile cache: a second start with the same model and settings reports a hit; anything
that changes the compiled code (dtype, splitting ops, vgraph source) gets its own folder."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from tests.compilation.runner_utils import load_runner
from vgraph.compilation import cache as compile_cache


def test_second_start_hits_the_cache(tiny_checkpoint, tmp_path, caplog):
    folder = tiny_checkpoint("llama")
    with caplog.at_level(logging.INFO, logger="vgraph.compilation.piecewise"):
        first = load_runner(folder, tmp_path).model_fn.stats
        second = load_runner(folder, tmp_path).model_fn.stats
    assert not first.cache_hit and second.cache_hit
    assert first.cache_dir == second.cache_dir
    logs = [r.getMessage() for r in caplog.records if "piecewise compile" in r.getMessage()]
    assert len(logs) == 2
    assert "compile cache miss" in logs[0] and "compile cache hit" in logs[1]
    assert " s; " in logs[1]  # how long compiling took
    manifest = json.loads(
        (tmp_path / first.cache_dir.rsplit("/", 1)[1] / "manifest.json").read_text()
    )
    assert manifest["num_pieces"] == 3 and len(manifest["graph_hashes"]) == 5
    assert manifest["factors"]["dtype"] == "torch.float32"


def test_what_changes_the_code_changes_the_key(tmp_path, monkeypatch):
    hf = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64}
    cpu = torch.device("cpu")

    def key(**changes: object) -> compile_cache.CompileCache:
        args = {
            "hf_config": hf,
            "dtype": torch.float32,
            "device": cpu,
            "splitting_ops": ("vgraph::unified_attention_with_output",),
            "use_inductor": False,
        }
        return compile_cache.CompileCache(
            tmp_path, compile_cache.key_factors(**{**args, **changes})
        )

    base = key()
    assert key().dir == base.dir  # deterministic
    assert base.dir.parent == tmp_path
    for changed in (
        key(dtype=torch.bfloat16),
        key(use_inductor=True),
        key(splitting_ops=()),
        key(hf_config={**hf, "hidden_size": 128}),
    ):
        assert changed.dir != base.dir
    monkeypatch.setattr(compile_cache, "source_hash", lambda: "edited-source")
    assert key().dir != base.dir
    assert key().factors["torch"] == torch.__version__


def test_default_folder_is_under_vgraph_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("VGRAPH_CACHE_DIR", str(tmp_path))
    assert compile_cache.cache_root(None) == tmp_path / "compile"
    assert compile_cache.cache_root(str(tmp_path / "x")) == tmp_path / "x"
    monkeypatch.delenv("VGRAPH_CACHE_DIR")
    assert str(compile_cache.cache_root(None)).endswith(".cache/vgraph/compile")


@pytest.mark.slow
def test_inductor_on_cpu_agrees_and_second_start_loads_its_artifacts(tiny_checkpoint, tmp_path):
    """Inductor pieces (C++ kernels, opaque to the recorder) give NONE's tokens, and the second
    start loads every piece from Inductor's FX graph cache instead of compiling it."""
    from tests.e2e.test_piecewise import run_workload

    folder = tiny_checkpoint("llama", num_hidden_layers=1)
    ref, _, _ = run_workload(folder, "NONE")
    cc = {"use_inductor": True, "cache_dir": str(tmp_path)}
    got, counters, _ = run_workload(folder, "PIECEWISE", **cc)
    assert got == ref and counters.steps["PIECEWISE"] > 0
    first = load_runner(folder, tmp_path, use_inductor=True).model_fn.stats
    assert first.cache_hit and first.inductor_cache_misses == 0
    assert first.inductor_cache_hits == first.num_pieces == 2

"""How vgraph/_C.so is linked: on the shared C++ runtime, never a second static copy of it (an
exception thrown through a library holding its own libstdc++ crashes the process)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vgraph import ext_build
from vgraph._ext import LIB_PATH, load_ext


def test_built_library_needs_the_shared_cxx_runtime() -> None:
    if not load_ext() or shutil.which("readelf") is None:
        pytest.skip("needs the built vgraph/_C.so and readelf")
    dynamic = subprocess.run(["readelf", "-d", str(LIB_PATH)], capture_output=True, text=True)
    needed = [line for line in dynamic.stdout.splitlines() if "(NEEDED)" in line]
    assert any("libstdc++.so" in line for line in needed), needed


def test_no_extra_flag_when_the_compiler_finds_the_shared_runtime(monkeypatch, tmp_path) -> None:
    dev_link = tmp_path / "libstdc++.so"
    dev_link.touch()
    monkeypatch.setattr(subprocess, "run", _prints(str(dev_link)))
    assert ext_build.cxx_runtime_ldflags() == []


def test_loaded_runtime_named_when_the_compiler_would_link_the_archive(monkeypatch) -> None:
    monkeypatch.setattr(subprocess, "run", _prints("libstdc++.so"))  # gcc: not found
    runtime = ext_build.loaded_libstdcxx()
    assert runtime is not None and Path(runtime).exists()  # torch runs on it in this process
    assert ext_build.cxx_runtime_ldflags() == [runtime]


def _prints(text: str):
    def run(*args, **kwargs):
        return subprocess.CompletedProcess(args, 0, stdout=text + "\n", stderr="")

    return run

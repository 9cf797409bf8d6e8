"""Builds the vgraph._C op library from csrc/ and installs it as vgraph/_C.so.

`python -m vgraph.ext_build [--force] [--verbose]`. CPU sources are always built; the CUDA
sources join when torch is a CUDA build and nvcc is found (or a GPU is visible). Arch flags come
from VGRAPH_CUDA_ARCH (default "90"; e.g. "90a" or "80;90"). The build is skipped when the sources,
flags and torch version are unchanged since the installed library was built.

Imported only by this entry point and tools, never by the engine (vgraph/_ext.py loads the result).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from vgraph._ext import LIB_PATH

REPO = Path(__file__).resolve().parents[1]
CSRC = REPO / "csrc"
BUILD_ROOT = REPO / "build" / "ext"
CPU_SOURCES = [
    "bindings.cpp",
    "attention_cpu.cpp",
    "cascade_cpu.cpp",
    "cache_cpu.cpp",
    "layers_cpu.cpp",
    "decode_cpu.cpp",
]
CUDA_SOURCES = [
    "attention_cuda.cu",
    "cascade_cuda.cu",
    "cache_cuda.cu",
    "layers_cuda.cu",
    "decode_cuda.cu",
    "decode_gemv_store.cu",
    "decode_gemv_residual.cu",
    "decode_gemv_silu.cu",
    "decode_gemv_qkv.cu",
    "decode_gemv_norm_store.cu",
    "decode_mlp.cu",
    "sampling_cuda.cu",
]


def cuda_wanted() -> bool:
    """A CUDA build needs a CUDA torch and nvcc; a visible GPU implies both."""
    if torch.cuda.is_available():
        return True
    if torch.version.cuda is None:
        return False
    from torch.utils.cpp_extension import CUDA_HOME

    nvcc = Path(CUDA_HOME) / "bin" / "nvcc" if CUDA_HOME else None
    return bool(nvcc and nvcc.exists()) or shutil.which("nvcc") is not None


def cuda_arch_flags() -> list[str]:
    archs = os.environ.get("VGRAPH_CUDA_ARCH", "90")
    flags = []
    for arch in archs.replace(",", ";").split(";"):
        arch = arch.strip().replace(".", "")
        if not arch:
            continue
        if not arch[:2].isdigit():
            raise ValueError(f"VGRAPH_CUDA_ARCH={archs!r}: expected entries like 90, 90a or 80")
        flags.append(f"-gencode=arch=compute_{arch},code=sm_{arch}")
    return flags


def loaded_libstdcxx() -> str | None:
    """Path of the libstdc++ shared object this process runs on (torch loads it), if any."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1]
        if Path(path).name.startswith("libstdc++.so"):
            return path
    return None


def cxx_runtime_ldflags() -> list[str]:
    """Links the shared C++ runtime by its file when the compiler would take the static one.

    A compiler that finds no libstdc++.so of its own links libstdc++.a into _C.so (seen
    2026-12-01 on the H200 machine, whose CXX is a g++ under /opt/gcc): a second C++ runtime in
    the process, and every exception thrown through _C.so (each rejected argument's TORCH_CHECK)
    then ends the process with SIGSEGV instead of raising. Naming the runtime that torch already
    loaded resolves the library's C++ symbols there."""
    cxx = os.environ.get("CXX", "c++")
    try:
        found = subprocess.run(
            [cxx, "-print-file-name=libstdc++.so"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return []
    if os.path.isabs(found) and os.path.exists(found):
        return []  # the driver's -lstdc++ finds the shared library itself
    runtime = loaded_libstdcxx()
    return [runtime] if runtime else []


def build_flags(with_cuda: bool) -> dict[str, list[str]]:
    flags = {
        "extra_cflags": ["-O3", "-fopenmp"],  # at::parallel_for is OpenMP inlined in our TU
        "extra_ldflags": ["-fopenmp", *cxx_runtime_ldflags()],
        "extra_cuda_cflags": [],
    }
    if with_cuda:
        flags["extra_cuda_cflags"] = ["-O3", "-lineinfo", "--expt-relaxed-constexpr"]
        flags["extra_cuda_cflags"] += cuda_arch_flags()
    return flags


def fingerprint(sources: list[Path], flags: dict[str, list[str]]) -> str:
    h = hashlib.sha256()
    for path in sorted(sources) + sorted(CSRC.glob("*.h")) + sorted(CSRC.glob("*.cuh")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(repr(sorted(flags.items())).encode())
    h.update(torch.__version__.encode())
    return h.hexdigest()


def build(force: bool = False, verbose: bool = False) -> Path:
    """Builds (unless up to date) and installs vgraph/_C.so; returns its path."""
    from torch.utils.cpp_extension import load

    with_cuda = cuda_wanted()
    names = CPU_SOURCES + (CUDA_SOURCES if with_cuda else [])
    sources = [CSRC / name for name in names]
    flags = build_flags(with_cuda)
    build_dir = BUILD_ROOT / ("cuda" if with_cuda else "cpu")
    build_dir.mkdir(parents=True, exist_ok=True)
    stamp = build_dir / "stamp"
    digest = fingerprint(sources, flags)
    if not force and LIB_PATH.exists() and stamp.exists() and stamp.read_text() == digest:
        print(f"vgraph._C is up to date ({LIB_PATH})")
        return LIB_PATH
    start = time.perf_counter()
    print(f"building vgraph._C ({'CPU + CUDA' if with_cuda else 'CPU only'}) in {build_dir}")
    load(
        name="_C",
        sources=[str(s) for s in sources],
        build_directory=str(build_dir),
        with_cuda=with_cuda,
        is_python_module=False,
        verbose=verbose,
        **flags,
    )
    # Install atomically: a running process may have the old library mapped.
    tmp = LIB_PATH.with_suffix(".so.tmp")
    shutil.copyfile(build_dir / "_C.so", tmp)
    os.replace(tmp, LIB_PATH)
    stamp.write_text(digest)
    print(f"built {LIB_PATH} in {time.perf_counter() - start:.1f} s")
    return LIB_PATH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--verbose", action="store_true", help="show the compiler commands")
    args = parser.parse_args(argv)
    build(force=args.force, verbose=args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Private torch APIs are called from vgraph/torch_internals.py only (a torch upgrade touches one
file). vgraph/config keeps its import-light availability probes (Triton, Dynamo)."""

from __future__ import annotations

import re
from pathlib import Path

import vgraph

PRIVATE = re.compile(
    r"torch\._C\b|torch\._library|torch\._dynamo|torch\._inductor|torch\._ops"
    r"|torch\.utils\._python_dispatch|torch\.utils\._pytree|\._schema\b|_init_fn|OPDEFS"
)
ALLOWED = {"torch_internals.py", "config/compilation.py"}


def test_private_torch_apis_live_in_one_module():
    root = Path(vgraph.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in ALLOWED:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []

"""vgraph/config is the ground floor: importing it loads no other vgraph module."""

from __future__ import annotations

import json
import subprocess
import sys


def test_config_imports_nothing_else_from_vgraph():
    code = (
        "import json, sys; import vgraph.config; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('vgraph'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    assert "vgraph.config.modes" in loaded  # the check sees the package's own modules
    outside = [m for m in loaded if m != "vgraph" and not m.startswith("vgraph.config")]
    assert outside == []

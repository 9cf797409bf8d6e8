"""Decode-step latency with the fused decode ops against the torch path of the same build, in one
process: `vgraph bench step` twice per model, the second time with LlamaModel's fused ops turned
off, so both columns come from the same machine state. Arguments after the model list go to
`vgraph bench step` (e.g. --modes FULL --batch-sizes 1 16); --out-dir gets one JSON per run.

    VGRAPH_ENABLE_MULTIPROCESSING=0 python benchmarks/bench_decode_step_ab.py \
        --models SmolLM2-135M Llama-3.2-1B --out-dir /tmp/ab -- --modes FULL --batch-sizes 1 16
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vgraph.bench.step import add_cli_args, main
from vgraph.models.llama import LlamaModel


def run(model: str, fused: bool, bench_args: list[str], out: Path) -> dict:
    original = LlamaModel.use_fused_ops
    if not fused:
        LlamaModel.use_fused_ops = lambda self, x: False
    try:
        argv = ["--model", model, "--out", str(out), *bench_args]
        return main(add_cli_args(argparse.ArgumentParser()).parse_args(argv))
    finally:
        LlamaModel.use_fused_ops = original


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["SmolLM2-135M", "Llama-3.2-1B"])
    parser.add_argument("--out-dir", default="benchmarks/results/decode_step_ab")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    bench_args = [a for a in args.bench_args if a != "--"]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = []
    for model in args.models:
        for fused in (True, False):
            tag = "fused" if fused else "torch"
            report = run(model, fused, bench_args, out_dir / f"latency_{model}_{tag}.json")
            for r in report["results"]:
                summary.append({"model": model, "path": tag, "mode": r["mode"], **r["decode_ms"]})
    print("\ndecode step, median ms")
    for s in summary:
        cols = " ".join(
            f"B={k}: {v:.3f}" for k, v in s.items() if k not in ("model", "path", "mode")
        )
        print(f"{s['model']:14} {s['path']:6} {s['mode']:6} {cols}")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(cli())

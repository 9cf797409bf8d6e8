"""Start-up seconds and peak memory of the default model per graph mode, one subprocess per mode.

    python tools/graph_memory.py [--modes NONE FULL_DECODE_ONLY PIECEWISE] [--sizes 1 2 4 8]

Each mode runs in a fresh interpreter: `LLM(...)` with the engine core in-process (so one
process holds everything and its peak RSS is the figure), then a short greedy generation whose
tokens must equal NONE's. Prints one line per mode and a JSON summary. Without --sizes the default
capture list is used (the one that matters: 51 sizes up to 512).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]


def child(mode: str, sizes: list[int] | None) -> None:
    from vgraph import LLM, SamplingParams

    cc: dict = {"cudagraph_mode": mode}
    if sizes:
        cc["cudagraph_capture_sizes"] = sizes
    t0 = time.perf_counter()
    llm = LLM(multiprocess=False, compilation_config=cc)
    start_s = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start_cpu_s = usage.ru_utime + usage.ru_stime  # less sensitive to a busy machine than wall
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=16), use_tqdm=False)
    tokens = [o.outputs[0].token_ids for o in outs]
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    row = {"mode": mode, "start_s": start_s, "start_cpu_s": start_cpu_s, "peak_rss_mib": peak_mib}
    print(json.dumps({**row, "tokens": tokens}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["NONE", "FULL_DECODE_ONLY", "PIECEWISE"])
    ap.add_argument("--sizes", nargs="+", type=int, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.sizes)
        return
    results = []
    for mode in args.modes:
        cmd = [sys.executable, __file__, "--child", mode]
        if args.sizes:
            cmd += ["--sizes", *map(str, args.sizes)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(
                f"{mode}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}", file=sys.stderr
            )
            results.append({"mode": mode, "error": proc.returncode})
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print({k: v for k, v in results[-1].items() if k != "tokens"}, flush=True)
    base = next((r for r in results if r.get("mode") == "NONE" and "tokens" in r), None)
    for r in results:
        if "error" in r:
            continue
        ratio = r["peak_rss_mib"] / base["peak_rss_mib"] if base else float("nan")
        same = "same tokens as NONE" if base and r["tokens"] == base["tokens"] else "TOKENS DIFFER"
        print(
            f"{r['mode']:>18}: start {r['start_s']:6.1f} s ({r.get('start_cpu_s', 0):.1f} CPU s), "
            f"peak RSS {r['peak_rss_mib']:7.0f} MiB "
            f"({ratio:.2f}x NONE), {same if base else ''}"
        )
    print(json.dumps([{k: v for k, v in r.items() if k != "tokens"} for r in results]))


if __name__ == "__main__":
    main()

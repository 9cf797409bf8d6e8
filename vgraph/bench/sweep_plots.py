"""PNG plots of a `vgraph bench sweep` report (matplotlib, Agg backend: no display needed):
  <prefix>_latency.png     step latency vs batch size per candidate, one panel per mode (the
                           padding sawtooth), the eager baseline dashed, workload batches dotted;
  <prefix>_pareto.png      graph memory and capture time vs the workload's expected step time,
                           the Pareto front joined and ringed;
  <prefix>_throughput.png  end-to-end output tokens/s per concurrency level per candidate.
Reads the report dict only; matplotlib is the `bench` extra. Plots of a saved report (e.g. from a
machine without matplotlib): `python -m vgraph.bench.sweep_plots REPORT.json [OUT_DIR]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MODE_MARKERS = {"NONE": "X", "PIECEWISE": "s", "FULL_DECODE_ONLY": "o", "FULL": "^"}


def make_plots(report: dict[str, Any], out_dir: Path, prefix: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [r for r in report["results"] if "expected_step_ms" in r]
    title = f"{Path(report['model']).name} ({report['environment'].get('gpu', 'CPU')})"
    paths = []
    for name, draw in (
        ("latency", _latency),
        ("pareto", _pareto),
        ("throughput", _throughput),
    ):
        fig = draw(plt, rows, report, title)
        path = out_dir / f"{prefix}_{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(str(path))
    return paths


def _modes(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["mode"] for r in rows if r["mode"] != "NONE")) or ["NONE"]


def _latency(plt: Any, rows: list[dict[str, Any]], report: dict[str, Any], title: str) -> Any:
    from matplotlib.ticker import MaxNLocator

    modes = _modes(rows)
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.6), squeeze=False)
    eager = next((r for r in rows if r["mode"] == "NONE"), None)
    batches = [int(b) for b in report["workload"]["histogram"]]
    for ax, mode in zip(axes[0], modes):
        for r in rows:
            if r["mode"] != mode:
                continue
            xs = sorted(int(b) for b in r["step_ms"])
            ax.plot(xs, [r["step_ms"][b] for b in xs], marker=".", label=r["list"])
        if eager is not None:
            xs = sorted(int(b) for b in eager["step_ms"])
            ys = [eager["step_ms"][b] for b in xs]
            ax.plot(xs, ys, "--", color="grey", label="NONE (eager)")
        for b in batches:
            ax.axvline(b, color="black", linestyle=":", linewidth=0.8, alpha=0.5)
        ax.set_title(f"{mode}: decode step latency (dotted: workload batches)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("batch size (requests in the decode step)")
        ax.set_ylabel("step latency, median (ms)")
        ax.grid(alpha=0.3)
        ax.legend(title="capture list", fontsize=8)
    fig.suptitle(f"{title}: padding sawtooth")
    return fig


def _pareto(plt: Any, rows: list[dict[str, Any]], report: dict[str, Any], title: str) -> Any:
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    panels = (
        ("graph_memory_mib", "pareto_memory", "graph memory (MiB)"),
        ("capture_s", "pareto_capture", "capture time (s)"),
    )
    for ax, (key, flag, label) in zip(axes, panels):
        for r in rows:
            marker = MODE_MARKERS.get(r["mode"], "D")
            ax.scatter(r["expected_step_ms"], r[key], marker=marker, s=45, zorder=3)
            ax.annotate(
                r["name"],
                (r["expected_step_ms"], r[key]),
                fontsize=7,
                xytext=(4, 3),
                textcoords="offset points",
            )
        front = sorted((r for r in rows if r[flag]), key=lambda r: r["expected_step_ms"])
        ax.plot(
            [r["expected_step_ms"] for r in front],
            [r[key] for r in front],
            "-",
            color="tab:red",
            linewidth=1.2,
            label="Pareto front",
            zorder=2,
        )
        ax.scatter(
            [r["expected_step_ms"] for r in front],
            [r[key] for r in front],
            s=160,
            facecolors="none",
            edgecolors="tab:red",
            zorder=4,
        )
        ax.set_xlabel("expected decode step time = mean TPOT for the workload (ms)")
        ax.set_ylabel(label)
        ax.set_title(f"{label.split(' (')[0]} vs workload step time")
        ax.grid(alpha=0.3)
        for mode, marker in MODE_MARKERS.items():
            if any(r["mode"] == mode for r in rows):
                ax.scatter([], [], marker=marker, color="grey", label=mode)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title}: cost of the graphs vs what they buy")
    return fig


def _throughput(plt: Any, rows: list[dict[str, Any]], report: dict[str, Any], title: str) -> Any:
    modes = _modes(rows)
    levels = report["workload"]["concurrency"]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.6), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        mine = [r for r in rows if r["mode"] in (mode, "NONE")]
        width = 0.8 / len(mine)
        for i, r in enumerate(mine):
            xs = [j + (i - (len(mine) - 1) / 2) * width for j in range(len(levels))]
            ys = [_e2e(r, c)["output_tok_s"] for c in levels]
            label = "NONE (eager)" if r["mode"] == "NONE" else r["list"]
            ax.bar(xs, ys, width, label=label)
        ax.set_xticks(range(len(levels)), [str(c) for c in levels])
        ax.set_xlabel("concurrency (requests generating together)")
        ax.set_ylabel("output tokens / s")
        ax.set_title(f"{mode}: end-to-end decode throughput")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(title="capture list", fontsize=8)
    fig.suptitle(title)
    return fig


def _e2e(r: dict[str, Any], level: int) -> dict[str, Any]:
    return r["e2e"][level]


def load_report(path: Path) -> dict[str, Any]:
    """A saved report with its batch sizes and levels as ints again (JSON made them strings)."""
    report = json.loads(path.read_text())
    w = report["workload"]
    w["histogram"] = {int(b): n for b, n in w["histogram"].items()}
    for r in report["results"]:
        for key in ("step_ms", "step_mode", "step_padded", "e2e"):
            if key in r:
                r[key] = {int(b): v for b, v in r[key].items()}
    return report


if __name__ == "__main__":
    src = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else src.parent
    print("\n".join(make_plots(load_report(src), out, src.stem)))

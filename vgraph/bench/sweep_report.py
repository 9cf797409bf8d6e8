"""What `vgraph bench sweep` makes of its measurements: the recommended capture lists (from the
optimiser, with predicted and measured gains over the default list), the workload's expected step
time per candidate, the Pareto fronts, the JSON, the terminal tables and the plots. It measures
nothing and starts no engine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

from vgraph.bench.capture_plan import MemoryModel, StepCosts, nondecreasing_fit, optimal_plan
from vgraph.bench.common import environment
from vgraph.bench.sweep_candidates import RECOMMENDED, Candidate
from vgraph.bench.sweep_timing import TIMING


class Report:
    def __init__(
        self,
        args: argparse.Namespace,
        histogram: dict[int, float],
        source: str,
        default: tuple[int, ...],
    ) -> None:
        self.args = args
        self.histogram = histogram
        self.source = source
        self.default = default
        self.recommendations: dict[str, dict[str, Any]] = {}
        self.timing_engines: dict[str, dict[str, Any]] = {}  # mode -> its lists and start-up

    # ---- the recommendation -----------------------------------------------------------------
    def plan(self, basis: list[Candidate], pending: list[Candidate]) -> None:
        """Per mode: the optimiser's list from the `all` candidate's per-size step times and the
        eager baseline's; sets the sizes of that mode's `recommended` candidates."""
        args = self.args
        eager = next((c for c in basis if c.mode == "NONE"), None)
        budget = None if args.memory_budget_mib is None else args.memory_budget_mib * 2**20
        for mode in dict.fromkeys(c.mode for c in pending):
            mine = [c for c in pending if c.mode == mode]
            full = next((c for c in basis if c.mode == mode), None)
            rec: dict[str, Any] = {"mode": mode, "max_sizes": args.max_sizes}
            rec["memory_budget_mib"] = args.memory_budget_mib
            self.recommendations[mode] = rec
            if full is None or eager is None:
                rec["error"] = "the all-sizes or the NONE candidate did not start"
                for c in mine:
                    c.result["error"] = rec["error"]
                continue
            r = full.result
            costs = StepCosts(
                weights=self.histogram,
                graph_ms=nondecreasing_fit(
                    {
                        s: ms
                        for s, ms in r["step_ms"].items()
                        if r["step_padded"][s] == s and r["step_mode"][s] != "NONE"
                    }
                ),
                eager_ms=dict(eager.result["step_ms"]),  # pass 2 overwrites the results
                memory=MemoryModel.from_capture(
                    {int(s): b for s, b in r["graph_memory_per_size"].items()}
                ),
            )
            plan = optimal_plan(costs, args.max_sizes, budget)
            rec["basis"] = full.name
            rec["basis_graph_ms"], rec["basis_eager_ms"] = costs.graph_ms, costs.eager_ms
            if plan is None:
                rec["error"] = "no capture list fits --max-sizes / --memory-budget-mib"
                for c in mine:
                    c.result["error"] = rec["error"]
                continue
            rec["sizes"] = list(plan.sizes)
            rec["compilation_config"] = json.dumps(
                {"cudagraph_mode": mode, "cudagraph_capture_sizes": list(plan.sizes)}
            )
            rec["predicted_ms"] = plan.expected_ms
            rec["predicted_memory_mib"] = plan.memory_bytes / 2**20
            try:
                rec["predicted_default_ms"] = costs.expected_ms(self.default)
                rec["predicted_gain_pct"] = _gain(rec["predicted_default_ms"], plan.expected_ms)
            except KeyError:  # the default list pads past the measured range
                rec["predicted_default_ms"] = rec["predicted_gain_pct"] = None
            for c in mine:
                c.sizes = plan.sizes
                c.result["requested_sizes"] = list(plan.sizes)

    # ---- the end ----------------------------------------------------------------------------
    def finish(self, cands: list[Candidate]) -> dict[str, Any]:
        measured = [c.result for c in cands if "step_ms" in c.result and "e2e" in c.result]
        total = sum(self.histogram.values())
        for r in measured:
            r["expected_step_ms"] = (
                sum(w * r["step_ms"][b] for b, w in self.histogram.items()) / total
            )
        for key, axis in (("pareto_memory", "graph_memory_mib"), ("pareto_capture", "capture_s")):
            for r in measured:
                r[key] = not any(_beats(o, r, axis) for o in measured)
        self._measured_gains(measured)
        report = self.write([c.result for c in cands])
        plot_dir = self.args.plot_dir or (Path(self.args.out).parent if self.args.out else None)
        if plot_dir is not None and measured:
            from vgraph.bench.sweep_plots import make_plots

            prefix = Path(self.args.out).stem if self.args.out else "sweep"
            if importlib.util.find_spec("matplotlib") is None:
                print(
                    "bench sweep: matplotlib is not installed (the `bench` extra): no plots; "
                    "make them later with python -m vgraph.bench.sweep_plots REPORT.json"
                )
            else:
                report["plots"] = make_plots(report, Path(plot_dir), prefix)
                report = self.write(report["results"], report["plots"])
        print_tables(report)
        return report

    def _measured_gains(self, measured: list[dict[str, Any]]) -> None:
        """The recommended candidate of each mode against that mode's default-list candidate
        and the best candidate at each concurrency level."""
        by_name = {r["name"]: r for r in measured}
        for mode, rec in self.recommendations.items():
            mine = by_name.get(f"{mode}:{RECOMMENDED}")
            base = by_name.get(f"{mode}:default")
            if mine is None:
                continue
            rec["measured_ms"] = mine["expected_step_ms"]
            rec["graph_memory_mib"] = mine["graph_memory_mib"]
            rec["startup_s"] = mine["startup_s"]
            same_mode = [r for r in measured if r["mode"] == mode]
            for key, pool in (
                ("throughput_vs_best_pct", measured),
                ("throughput_vs_best_in_mode_pct", same_mode),
            ):
                rec[key] = {
                    level: 100
                    * e["output_tok_s"]
                    / max(r["e2e"][level]["output_tok_s"] for r in pool)
                    for level, e in mine["e2e"].items()
                }
            if base is not None:
                rec["measured_default_ms"] = base["expected_step_ms"]
                rec["measured_gain_pct"] = _gain(base["expected_step_ms"], mine["expected_step_ms"])
                rec["default_graph_memory_mib"] = base["graph_memory_mib"]
                rec["default_startup_s"] = base["startup_s"]
                rec["throughput_vs_default_pct"] = {
                    level: 100 * e["output_tok_s"] / base["e2e"][level]["output_tok_s"]
                    for level, e in mine["e2e"].items()
                }

    def write(self, results: list[dict[str, Any]], plots: list[str] | None = None) -> dict:
        a = self.args
        report = {
            "benchmark": "sweep",
            "model": a.model,
            "load_format": a.load_format,
            "workload": {
                "source": self.source,
                "histogram": self.histogram,
                "concurrency": a.concurrency,
                "input_len": a.input_len,
                "output_len": a.output_len,
                "context_len": a.context_len,
            },
            "default_sizes": list(self.default),
            "num_iters": a.num_iters,
            "num_rounds": a.num_rounds,
            "timing": TIMING,
            "timing_engines": self.timing_engines,
            "environment": environment(),
            "results": results,
            "recommendations": self.recommendations,
            "plots": plots or [],
        }
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            with open(a.out, "w") as f:
                json.dump(report, f, indent=2)
        return report


def _gain(base_ms: float, new_ms: float) -> float:
    """Percent less time per step than the base."""
    return 100 * (base_ms - new_ms) / base_ms


def _beats(o: dict[str, Any], r: dict[str, Any], axis: str) -> bool:
    """o is no worse than r on `axis` and expected step time, and better on one."""
    a, b = (o.get(axis, 0.0), o["expected_step_ms"]), (r.get(axis, 0.0), r["expected_step_ms"])
    return a[0] <= b[0] and a[1] <= b[1] and a != b


def print_tables(report: dict[str, Any]) -> None:
    rows = report["results"]
    levels = report["workload"]["concurrency"]
    print(f"\n{report['model']}: capture-list sweep ({report['workload']['source']} workload)")
    head = f"{'candidate':<34}{'graphs':>7}{'start s':>9}{'compile s':>10}{'capture s':>10}"
    head += f"{'mem MiB':>9}{'KV blks':>9}{'E[step] ms':>11}{'pad % max':>10}{'>max':>7}"
    print(head)
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<34}failed: {r['error']}")
            continue
        if "expected_step_ms" not in r:
            continue
        e2e = r["e2e"].values()
        row = f"{r['name']:<34}{int(r['num_graphs']):>7}{r['startup_s']:>9.1f}"
        row += f"{r.get('compile_s', 0.0):>10.1f}{r['capture_s']:>10.1f}"
        row += f"{r['graph_memory_mib']:>9.1f}{r['graph_kv_blocks']:>9.0f}"
        row += f"{r['expected_step_ms']:>11.3f}"
        row += f"{max(e['decode_pad_waste_pct'] for e in e2e):>10.1f}"
        row += f"{sum(e['eager_fallbacks']['above_max_size'] for e in e2e):>7}"
        print(row + ("  *" if r["pareto_memory"] else ""))
    print(
        "E[step]: the workload's mean decode step (= TPOT); pad % max: extra decode tokens "
        "computed, at the concurrency level that pads most; "
        ">max: steps run eagerly above the largest size; *: on the Pareto front of graph memory "
        "vs E[step]"
    )
    print("\nend to end: output tokens/s | median TPOT ms, per concurrency level")
    print(f"{'candidate':<34}" + "".join(f"{'c=' + str(c):>20}" for c in levels))
    for r in rows:
        if "expected_step_ms" in r:
            cells = (
                f"{r['e2e'][c]['output_tok_s']:>10.1f} |{r['e2e'][c]['tpot_ms']:>7.3f}"
                for c in levels
            )
            print(f"{r['name']:<34}" + "".join(f"{cell:>20}" for cell in cells))
    for mode, rec in report["recommendations"].items():
        if "error" in rec:
            print(f"\n{mode}: no recommendation: {rec['error']}")
            continue
        print(f"\n{mode}: recommended capture list {rec['sizes']}")
        print(f"  --compilation-config '{rec['compilation_config']}'")
        pred = rec.get("predicted_gain_pct")
        print(
            f"  expected step {rec['predicted_ms']:.3f} ms predicted"
            + (
                ""
                if pred is None
                else f" ({pred:+.1f}% vs default {rec['predicted_default_ms']:.3f} ms)"
            )
        )
        if "measured_gain_pct" in rec:
            print(
                f"  measured {rec['measured_ms']:.3f} ms ({rec['measured_gain_pct']:+.1f}% vs "
                f"default {rec['measured_default_ms']:.3f} ms); graph memory "
                f"{rec['graph_memory_mib']:.1f} MiB vs {rec['default_graph_memory_mib']:.1f} MiB; "
                f"start-up {rec['startup_s']:.1f} s vs {rec['default_startup_s']:.1f} s"
            )
        for key, label in (
            ("throughput_vs_best_in_mode_pct", f"best {mode} candidate"),
            ("throughput_vs_best_pct", "best candidate"),
        ):
            if key in rec:
                cells = ", ".join(f"c={lv}: {pct:.1f}%" for lv, pct in rec[key].items())
                print(f"  throughput vs the {label}: {cells}")

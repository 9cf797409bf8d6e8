"""Decode attention on the GPU: vgraph_C.paged_attention against the HBM floor and FlashInfer.

For each batch x context (bf16, head_dim 128, 32 query / 8 kv heads, block size 16): times the op
inside a CUDA graph (CUDA events, warm-up, median of many replays), computes the bytes-moved floor
(K+V read, q read, out written) at --hbm-tbs, and times FlashInfer's
BatchDecodeWithPagedKVCacheWrapper the same way when flashinfer imports (plan outside the timing),
plain and with tensor cores, and FlashInfer through vgraph's flashinfer backend (its planner's
CUDA-graph wrapper and the layer's forward, as the engine's FULL graphs run it).
Each graph cycles through several copies of the KV data (different block ids in one cache) so
that small cases read HBM, not L2. Prints a table; writes JSON to --out.

    python benchmarks/bench_paged_attention.py --out benchmarks/results/paged_attention.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch

from vgraph._ext import ext_unavailable_reason, has_cuda_kernels, load_ext
from vgraph.bench.kernels import time_graph

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
DTYPE = torch.bfloat16


def time_calls(calls: list[Callable[[], object]], replays: int) -> float:
    """Median microseconds per call of `calls` captured back to back in one CUDA graph."""
    return time_graph(lambda: [call() for call in calls], len(calls), replays)


class Case:
    """One batch x context: a shared cache, `copies` block tables over disjoint blocks."""

    def __init__(self, batch: int, context: int, l2_bytes: int) -> None:
        self.batch, self.context = batch, context
        self.blocks_per_req = math.ceil(context / BLOCK_SIZE)
        kv_bytes = batch * context * NUM_KV_HEADS * HEAD_DIM * 2 * DTYPE.itemsize
        self.copies = max(1, min(32, math.ceil(4 * l2_bytes / kv_bytes)))
        num_blocks = self.copies * batch * self.blocks_per_req
        cache_shape = (2, num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
        self.kv_cache = torch.randn(cache_shape, device="cuda", dtype=DTYPE)
        perm = torch.randperm(num_blocks, device="cuda", dtype=torch.int32)
        # [copies, batch, blocks_per_req]: random, non-contiguous block ids
        self.block_tables = perm.view(self.copies, batch, self.blocks_per_req)
        self.query = torch.randn(batch, NUM_HEADS, HEAD_DIM, device="cuda", dtype=DTYPE)
        self.query_start_loc = torch.arange(batch + 1, device="cuda", dtype=torch.int32)
        self.seq_lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
        self.scale = HEAD_DIM**-0.5
        self.bytes = kv_bytes + 2 * self.query.numel() * DTYPE.itemsize
        self.calls_per_graph = max(self.copies, 8)

    def vgraph_calls(self, out: torch.Tensor) -> list[Callable[[], object]]:
        k_cache, v_cache = self.kv_cache[0], self.kv_cache[1]

        def call(i: int) -> Callable[[], object]:
            table = self.block_tables[i % self.copies]
            return lambda: torch.ops.vgraph_C.paged_attention(
                out,
                self.query,
                k_cache,
                v_cache,
                self.query_start_loc,
                self.seq_lens,
                table,
                self.scale,
                None,
            )

        return [call(i) for i in range(self.calls_per_graph)]

    def flashinfer_calls(self, out: torch.Tensor, tensor_cores: bool) -> list[Callable[[], object]]:
        import flashinfer

        indptr = torch.arange(self.batch + 1, device="cuda", dtype=torch.int32)
        indptr *= self.blocks_per_req
        last_page_len = self.context - (self.blocks_per_req - 1) * BLOCK_SIZE
        last = torch.full((self.batch,), last_page_len, device="cuda", dtype=torch.int32)
        kv = (self.kv_cache[0], self.kv_cache[1])  # NHD pages: [num_blocks, 16, kv_heads, 128]
        wrappers = []
        for i in range(self.copies):
            indices = self.block_tables[i].flatten().contiguous()
            workspace = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                workspace,
                "NHD",
                use_cuda_graph=True,
                use_tensor_cores=tensor_cores,
                paged_kv_indptr_buffer=indptr.clone(),
                paged_kv_indices_buffer=indices.clone(),
                paged_kv_last_page_len_buffer=last.clone(),
            )
            wrapper.plan(
                indptr,
                indices,
                last,
                NUM_HEADS,
                NUM_KV_HEADS,
                HEAD_DIM,
                BLOCK_SIZE,
                pos_encoding_mode="NONE",
                q_data_type=DTYPE,
                kv_data_type=DTYPE,
            )
            wrappers.append(wrapper)

        def call(i: int) -> Callable[[], object]:
            w = wrappers[i % self.copies]
            return lambda: w.run(self.query, kv, out=out)

        return [call(i) for i in range(self.calls_per_graph)]

    def backend_calls(self, out: torch.Tensor) -> list[Callable[[], object]]:
        """FlashInfer as the engine runs it: vgraph's flashinfer backend, its planner's CUDA-graph
        decode wrapper planned on the host, the layer's forward captured."""
        from vgraph.attention.backend import AttentionSpec, CommonAttentionMetadata
        from vgraph.attention.flashinfer_backend import FlashInferAttentionImpl, FlashInferPlanner

        spec = AttentionSpec(
            NUM_HEADS,
            NUM_KV_HEADS,
            HEAD_DIM,
            self.scale,
            BLOCK_SIZE,
            DTYPE,
            torch.device("cuda"),
            max_num_reqs=self.batch,
            max_blocks_per_req=self.blocks_per_req,
        )
        impl = FlashInferAttentionImpl(NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, self.scale)
        plans = []
        for i in range(self.copies):
            table = self.block_tables[i]
            seq_lens_cpu = self.seq_lens.cpu()
            common = CommonAttentionMetadata(
                query_start_loc=self.query_start_loc,
                seq_lens=self.seq_lens,
                block_table=table,
                slot_mapping=torch.full((self.batch,), -1, device="cuda", dtype=torch.int64),
                query_start_loc_cpu=self.query_start_loc.cpu(),
                seq_lens_cpu=seq_lens_cpu,
                block_table_cpu=table.cpu(),
                num_reqs=self.batch,
                num_actual_tokens=self.batch,
                max_query_len=1,
                max_seq_len=self.context,
            )
            planner = FlashInferPlanner(spec)
            planner.plan(common, full_graph=True)
            plans.append(common)
        self.plan_us = plan_host_us(planner, common)

        def call(i: int) -> Callable[[], object]:
            common = plans[i % self.copies]
            return lambda: impl.forward(self.query, self.kv_cache, common, out)

        return [call(i) for i in range(self.calls_per_graph)]


def plan_host_us(planner, common, calls: int = 50) -> float:
    """Median host microseconds of one step's planning (what precedes each FULL replay)."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        planner.plan(common, full_graph=True)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def run_case(batch: int, context: int, args: argparse.Namespace, l2: int) -> dict:
    case = Case(batch, context, l2)
    out = torch.empty_like(case.query)
    row: dict = {"batch": batch, "context": context, "bytes": case.bytes}
    row["floor_us"] = case.bytes / (args.hbm_tbs * 1e12) * 1e6
    row["vgraph_us"] = time_calls(case.vgraph_calls(out), args.replays)
    row["vgraph_pct_of_floor"] = 100 * row["floor_us"] / row["vgraph_us"]
    if args.flashinfer:
        for tensor_cores in (False, True):
            key = f"flashinfer{'_tc' if tensor_cores else ''}_us"
            try:
                fi_out = torch.empty_like(case.query)
                row[key] = time_calls(case.flashinfer_calls(fi_out, tensor_cores), args.replays)
                # Both ran last on the same copy of the block table: outputs must agree.
                err = (fi_out.float() - out.float()).norm() / fi_out.float().norm()
                row[key.replace("_us", "_rel_diff")] = err.item()
            except Exception as e:  # noqa: BLE001 - an API drift must not lose the sweep
                row[key.replace("_us", "_error")] = f"{type(e).__name__}: {e}"
        try:
            be_out = torch.empty_like(case.query)
            row["flashinfer_backend_us"] = time_calls(case.backend_calls(be_out), args.replays)
            row["flashinfer_plan_host_us"] = case.plan_us
            err = (be_out.float() - out.float()).norm() / be_out.float().norm()
            row["flashinfer_backend_rel_diff"] = err.item()
        except Exception as e:  # noqa: BLE001
            row["flashinfer_backend_error"] = f"{type(e).__name__}: {e}"
        fi = [row[k] for k in ("flashinfer_us", "flashinfer_tc_us") if k in row]
        if fi:
            row["vgraph_vs_best_flashinfer"] = min(fi) / row["vgraph_us"]
    del case
    torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64, 128, 256])
    parser.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--replays", type=int, default=50, help="timed graph replays per case")
    parser.add_argument("--hbm-tbs", type=float, default=4.3, help="HBM floor bandwidth, TB/s")
    parser.add_argument("--no-flashinfer", dest="flashinfer", action="store_false")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_paged_attention needs a GPU", file=sys.stderr)
        return 1
    if not load_ext() or not has_cuda_kernels():
        print(ext_unavailable_reason() or "vgraph._C has no CUDA kernels", file=sys.stderr)
        return 1
    if args.flashinfer:
        try:
            import flashinfer  # noqa: F401
        except ImportError:
            print("flashinfer not importable: timing vgraph only")
            args.flashinfer = False
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    rows = []
    header = f"{'batch':>5} {'ctx':>5} {'floor us':>9} {'vgraph us':>10} {'% floor':>8}"
    if args.flashinfer:
        header += (
            f" {'FI us':>8} {'FI-tc us':>9} {'FI/vgraph':>9} {'backend us':>10} {'plan us':>8}"
        )
    print(header)
    for batch in args.batches:
        for context in args.contexts:
            r = run_case(batch, context, args, l2)
            rows.append(r)
            line = f"{batch:>5} {context:>5} {r['floor_us']:>9.1f} {r['vgraph_us']:>10.1f}"
            line += f" {r['vgraph_pct_of_floor']:>7.1f}%"
            if args.flashinfer:
                fi, tc = r.get("flashinfer_us", math.nan), r.get("flashinfer_tc_us", math.nan)
                ratio = r.get("vgraph_vs_best_flashinfer", math.nan)
                line += f" {fi:>8.1f} {tc:>9.1f} {ratio:>9.2f}"
                line += f" {r.get('flashinfer_backend_us', math.nan):>10.1f}"
                line += f" {r.get('flashinfer_plan_host_us', math.nan):>8.1f}"
            print(line, flush=True)
    result = {
        "benchmark": "paged_attention_decode",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "flashinfer": getattr(sys.modules.get("flashinfer"), "__version__", None),
        "python": platform.python_version(),
        "config": {
            "num_heads": NUM_HEADS,
            "num_kv_heads": NUM_KV_HEADS,
            "head_dim": HEAD_DIM,
            "block_size": BLOCK_SIZE,
            "dtype": str(DTYPE),
            "hbm_tbs": args.hbm_tbs,
            "timing": "CUDA graph of back-to-back calls, median of replays",
        },
        "rows": rows,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

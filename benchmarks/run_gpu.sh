#!/usr/bin/env bash
# The GPU session in one script: build csrc for sm_90, run the GPU tests, then the benchmarks.
# Usage on the GPU machine (repo root, carried wheels in .whl): bash benchmarks/run_gpu.sh OUTDIR
# Steps run in order of importance; each appends to OUTDIR/run.log and writes its JSON as it ends.
#   STEPS   which steps, in order (default: ext tests smollm2 llama profile kernels); a session
#           that must stay under the device's per-call limit splits them over two calls, e.g.
#           STEPS="ext tests smollm2" then STEPS="llama profile" (the built vgraph/_C.so stays).
#   MODES   cudagraph modes of the latency benchmark (default: all five).
#   Not in the default STEPS: async (the engine loop's decode step with and without async
#   scheduling, benchmarks/bench_async_scheduling.py -> async_step.json); serve (TPOT at
#   concurrency 1 through a real server; SERVE_ARGS adds `vgraph serve` flags); flashinfer
#   (the flashinfer backend's GPU tests, then the five-mode latency table of SmolLM2-135M for the
#   csrc, flashinfer and torch backends; FlashInfer compiles its kernels on first use, about
#   15 s + 90 s, into FLASHINFER_WORKSPACE_BASE; FI_BACKENDS picks the backends of the table) and
#   the sampler benchmark (vgraph's top-k/top-p path against FlashInfer's kernel); offline
#   (`vgraph bench latency` and `vgraph bench throughput`, vLLM's meanings, on SmolLM2-135M and
#   Llama-3.2-1B with dummy weights: batch-8 latency of 32 in + 128 out tokens, and 1000 prompts
#   of 128 in + 128 out tokens; JSON offline_latency_*.json / offline_throughput_*.json).
#   Not in the default STEPS: prefix (issue 14): the cascade GPU tests (kernel vs the float32
#           reference, greedy identity NONE vs FULL_AND_PIECEWISE with cascade steps), then
#           benchmarks/bench_prefix_cache.py on Llama-3.2-1B: TTFT of a second request sharing a
#           2,048-token prefix with and without prefix caching, and decode step time of up to 64
#           requests sharing up to 2,048 tokens with and without cascade (the cost rule's switch).
#           Needs the ext step first (or a built vgraph/_C.so).
#   Not in the default STEPS: sampling (decode step at batch 32 on SmolLM2-135M, dummy weights,
#           with penalties and structured outputs against plain greedy; needs the xgrammar wheel
#           carried in .whl: pip install --no-deps .whl/xgrammar-*.whl .whl/apache_tvm_ffi-*.whl).
#   BENCH_TIMEOUT, TEST_TIMEOUT, SWEEP_TIMEOUT   seconds per latency run / for the GPU tests /
#           per model of the sweep.
# Not in the default STEPS: `sweep`, the capture-list sweep of docs/tuning.md on SmolLM2-135M and
# Llama-3.2-1B (dummy weights; about 3-4 minutes per model): FULL_DECODE_ONLY and PIECEWISE x the
# default list, powers of two, powers of two plus the workload's concurrencies, and the
# recommended list (K=4), workload concurrency 1 6 24 48. Without matplotlib on the GPU machine
# the JSON is still written; make the plots elsewhere: python -m vgraph.bench.sweep_plots JSON.
# Not in the default STEPS: `tp`, tensor parallelism on two GPUs (nvidia-h200-x2): the tp GPU tests
# (tests/gpu/test_tensor_parallel_gpu.py: tp=2 == tp=1 greedy in every graph mode, a killed worker
# ends the engine), then per model of TP_MODELS (default: Llama-3.2-1B Qwen3-0.6B; dummy weights)
# benchmarks/bench_tp.py: greedy identity tp=2 vs tp=1 (float32 and bfloat16) and the decode step
# latency per mode (TP_MODES, default NONE PIECEWISE FULL_DECODE_ONLY) at batch 1, 16, 64 for tp=1
# and tp=2 -> OUTDIR/tp_<model>.json; about 4 minutes per model (TP_TIMEOUT, default 540 s).
set -u
out=${1:-benchmarks/results/latest}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 VGRAPH_ENABLE_MULTIPROCESSING=0
step() { local name=$1; shift; local t0=$SECONDS
  echo "== $name: $*" >>"$out/run.log"; "$@" >"$out/step.tmp" 2>&1; local rc=$?
  cat "$out/step.tmp" >>"$out/run.log"; echo "== $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/run.log"
  grep -v "it/s]\|graph/s]\|s/graph]" "$out/step.tmp" | tail -n 16; rm -f "$out/step.tmp"; }
# `vgraph bench step`: one engine step per cudagraph mode and batch size (JSON latency_*.json)
latency() { step "latency_$1" timeout "${BENCH_TIMEOUT:-300}" python3 -m vgraph.bench.step \
  --model "$1" --modes ${MODES:-NONE PIECEWISE FULL FULL_DECODE_ONLY FULL_AND_PIECEWISE} \
  --batch-sizes 1 8 32 128 --num-iters 50 --out "$out/latency_$1.json"; }
sweep() { step "sweep_$1" timeout "${SWEEP_TIMEOUT:-300}" python3 -m vgraph.bench.sweep \
  --model "$1" --modes FULL_DECODE_ONLY PIECEWISE \
  --lists default pow2 1,2,4,6,8,16,24,32,48 recommended --max-sizes 4 \
  --concurrency 1 6 24 48 --input-len 128 --output-len 128 \
  --num-iters 20 --num-warmup 2 --num-rounds 5 --out "$out/sweep_$1.json"; }

# `vgraph serve` (engine core in its own process, the default mode: the script's in-process
# setting does not reach it) driven by `vgraph bench serve` at each of SERVE_CONCURRENCY
# (default 1; 20 prompts, or 4 per concurrent request where that is more): its median TPOT at
# concurrency 1 against the batch-1 step of the latency benchmark is the engine's per-token
# overhead. SERVE_MODELS: the models served one after another (default SmolLM2-135M);
# SERVE_ARGS: more `vgraph serve` flags (e.g. --async-scheduling); SERVE_TAG: a suffix of the
# result files' names (serve_<model><tag>.json, _c<n> added above concurrency 1).
serve() { local port=8011 name="$1${SERVE_TAG:-}" log="$out/serve_$1${SERVE_TAG:-}.log" c
  VGRAPH_ENABLE_MULTIPROCESSING=1 python3 -m vgraph.entrypoints.cli serve "$1" --load-format dummy --port $port \
    --max-model-len 2048 ${SERVE_ARGS:-} >"$log" 2>&1 & local pid=$!
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  for c in ${SERVE_CONCURRENCY:-1}; do
    local tag="$name"; [ "$c" = 1 ] || tag="${name}_c$c"
    step "serve_$tag" timeout 180 python3 -m vgraph.entrypoints.cli bench serve \
      --base-url "http://127.0.0.1:$port" --num-prompts $((c * 4 > 20 ? c * 4 : 20)) \
      --dataset-name random --random-input-len 128 --random-output-len 256 \
      --max-concurrency "$c" --percentile-metrics ttft,tpot,itl,e2el \
      --metric-percentiles 50,90,99 --result-dir "$out" --result-filename "serve_$tag.json"
  done
  kill -TERM $pid; wait $pid; }

# vLLM's offline benchmarks under their vLLM names and meanings (default engine arguments: the
# CUDA default mode FULL_AND_PIECEWISE)
offline() {
  step "offline_latency_$1" timeout "${BENCH_TIMEOUT:-300}" python3 -m vgraph.entrypoints.cli \
    bench latency --model "$1" --load-format dummy --input-len 32 --output-len 128 \
    --batch-size 8 --num-iters-warmup 3 --num-iters 10 --output-json "$out/offline_latency_$1.json"
  step "offline_throughput_$1" timeout "${BENCH_TIMEOUT:-300}" python3 -m vgraph.entrypoints.cli \
    bench throughput --model "$1" --load-format dummy --dataset-name random --input-len 128 \
    --output-len 128 --num-prompts 1000 --output-json "$out/offline_throughput_$1.json"; }

for s in ${STEPS:-ext tests smollm2 llama profile kernels}; do
  case $s in
    ext) step ext python3 -m vgraph.ext_build ;;
    tests) step gpu_tests timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -v -p no:cacheprovider \
      tests/gpu tests/kernels -k "cuda or gpu or Cuda" ;;
    smollm2) latency SmolLM2-135M ;;
    llama) latency Llama-3.2-1B ;;
    profile) step profile_smollm2 timeout 150 python3 tools/profile_step.py --model SmolLM2-135M \
      --batch 1 --modes FULL PIECEWISE --out "$out/profile_SmolLM2-135M_b1.json" ;;
    serve) for m in ${SERVE_MODELS:-SmolLM2-135M}; do serve "$m"; done ;;
    prefix) step prefix_tests timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -v \
        -p no:cacheprovider tests/gpu/test_cascade_gpu.py tests/kernels/test_cascade_attention.py
      step prefix_bench timeout 540 python3 benchmarks/bench_prefix_cache.py \
        --model Llama-3.2-1B --out "$out/prefix_cache_Llama-3.2-1B.json" ;;
    sampling) step sampling_overhead timeout 300 python3 benchmarks/bench_sampling_overhead.py \
      --model SmolLM2-135M --batch 32 --out "$out/sampling_overhead.json" ;;
    sweep) sweep SmolLM2-135M; sweep Llama-3.2-1B ;;
    flashinfer) FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$HOME} step flashinfer_tests \
        timeout "${TEST_TIMEOUT:-400}" python3 -m pytest -v -p no:cacheprovider \
        tests/gpu/test_flashinfer_gpu.py tests/test_attention_selection.py
      step sampler_bench python3 benchmarks/bench_sampler.py --out "$out/sampler.json"
      for b in ${FI_BACKENDS-csrc flashinfer torch}; do
        step "latency_SmolLM2-135M_$b" timeout "${BENCH_TIMEOUT:-300}" python3 -m vgraph.bench.step \
          --model SmolLM2-135M --attention-backend $b --batch-sizes 1 8 32 128 --num-iters 50 \
          --no-kernel-profile --out "$out/latency_SmolLM2-135M_$b.json"
      done ;;
    tp) step tp_gpu_tests timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -v -p no:cacheprovider \
      tests/gpu/test_tensor_parallel_gpu.py
      for m in ${TP_MODELS:-Llama-3.2-1B Qwen3-0.6B}; do
        step "tp_$m" timeout "${TP_TIMEOUT:-540}" python3 benchmarks/bench_tp.py --models "$m" \
          --modes ${TP_MODES:-NONE PIECEWISE FULL_DECODE_ONLY} --batch-sizes 1 16 64 \
          --out "$out/tp_$m.json"
      done ;;
    offline) offline SmolLM2-135M; offline Llama-3.2-1B ;;
    async) step async_step timeout 200 python3 benchmarks/bench_async_scheduling.py \
      --models SmolLM2-135M Llama-3.2-1B --batch-sizes 1 4 8 16 --capture-sizes 1 2 4 8 16 \
      --rounds 5 --out "$out/async_step.json" ;;
    kernels) step kernel_bench python3 benchmarks/bench_paged_attention.py --batches 1 8 32 128 \
      --contexts 512 2048 8192 --out "$out/paged_attention.json" ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done

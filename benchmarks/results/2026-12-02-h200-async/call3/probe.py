"""Seeded sampling on dummy bf16 weights, sync and async engines, each twice (in-process,
one after the other): which pairs give equal tokens, and how far their greedy logprobs are."""

import random
import sys

from vgraph import LLM, SamplingParams


def gen(name, async_scheduling, mode):
    llm = LLM(name, load_format="dummy", max_model_len=512, async_scheduling=async_scheduling,
              multiprocess=False, gpu_memory_utilization=0.3,
              compilation_config={"cudagraph_mode": mode,
                                  "cudagraph_capture_sizes": [1, 2, 4, 8, 16]})
    rng = random.Random(0)
    prompts = [[rng.randrange(1000) for _ in range(n)] for n in (7, 64, 130, 19, 33, 90, 1)]
    greedy = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True, logprobs=2)
              for m in (40, 3, 25, 60, 1, 17, 33)]
    seeded = SamplingParams(temperature=0.8, top_p=0.9, seed=5, max_tokens=20, ignore_eos=True)
    g = llm.generate(prompts, greedy, use_tqdm=False)
    s = llm.generate(prompts, seeded, use_tqdm=False)
    s2 = llm.generate(prompts, seeded, use_tqdm=False)  # the same engine again: cache hits alike
    llm.shutdown()
    lps = [[d[t].logprob for d, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)] for o in g]
    return ([o.outputs[0].token_ids for o in g], [o.outputs[0].token_ids for o in s],
            [o.outputs[0].token_ids for o in s2], lps)


def lp_diff(a, b):
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


name, mode = sys.argv[1], sys.argv[2]
runs = {k: gen(name, k.startswith("async"), mode) for k in ("sync1", "sync2", "async1", "async2")}
for x, y in (("sync1", "sync2"), ("async1", "async2"), ("sync1", "async1"), ("sync2", "async2")):
    a, b = runs[x], runs[y]
    print(f"{name} {mode} {x} vs {y}: greedy {a[0] == b[0]} seeded {a[1] == b[1]} "
          f"seeded-again {a[2] == b[2]} greedy-logprob max diff {lp_diff(a[3], b[3]):.2e}")
for k, r in runs.items():
    print(f"{k}: seeded run 1 vs run 2 in one engine {r[1] == r[2]}")

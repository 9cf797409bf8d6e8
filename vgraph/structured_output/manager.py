"""The engine core's structured outputs: compile grammars off the step loop, keep one matcher per
request, fill the step's token bitmask, advance the matchers with the sampled tokens.

Lifecycle of a request with structured_outputs:
  1. submit(): its grammar is compiled on a worker thread (xgrammar releases the GIL; compiled
     grammars are cached by the compiler), so the busy loop keeps stepping the other requests;
  2. the engine core holds it back from the scheduler until poll() says its grammar is ready
     (or failed: then it ends with finish_reason "error" and the reason);
  3. each step that samples for it, grammar_bitmask() fills its row of the bitmask from its
     matcher (other rows allow everything; rows fill in parallel on xgrammar's threads, once
     the step's forward is launched, so the host fills while the device computes the logits; a
     Python thread started earlier would need the GIL back from the busy loop to return, and the
     handover costs more than the fill); the sampler masks the logits with it on the device;
  4. accept() queues each sampled token for its matcher; the next fill feeds the queue to the
     matchers in one batch first, so that this host work too runs while the device computes. Once
     the grammar is complete only the end-of-sequence tokens stay allowed, so the request stops
     as any other.
The step's bitmask is written into one host buffer kept across steps (pinned when CUDA is up, so
its copy to the device does not wait for the host): the step's copy is done before the next step
fills it again, since every step ends by reading its sampled tokens back.
The tokenizer is loaded here on first use (the engine core has none otherwise). Not thread-safe
beyond the compile step: only the busy loop calls these methods.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from vgraph.config import ModelConfig
from vgraph.request import Request
from vgraph.structured_output.grammar import build_grammar, import_xgrammar

logger = logging.getLogger(__name__)
MAX_COMPILE_THREADS = 2  # grammar compiles at once; more would take cores from the busy loop
# threads filling one step's bitmask rows: half the cores, the other half for the busy loop
MAX_FILL_THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))


class StructuredOutputManager:
    def __init__(self, model_config: ModelConfig) -> None:
        self.model_config = model_config
        self.vocab_size = model_config.vocab_size
        self._compiler: Any = None
        self._executor = ThreadPoolExecutor(MAX_COMPILE_THREADS, "vgraph-grammar")
        self._futures: dict[str, Future[Any]] = {}
        self.matchers: dict[str, Any] = {}  # request id -> xgrammar.GrammarMatcher
        self._batch: Any = None  # xgrammar.BatchGrammarMatcher: fills many rows at once
        self._pending: list[tuple[str, int]] = []  # (request id, token) not yet accepted
        self._bitmask = torch.empty(0, 0, dtype=torch.int32)  # the host buffer, grown as needed

    def _compile(self, request: Request) -> Any:
        """On a worker thread: the request's grammar compiled against the tokenizer."""
        xgr = import_xgrammar()
        if self._compiler is None:  # first use; later compiles wait on nothing but this
            from vgraph.tokenizer import eos_token_ids, load_tokenizer

            tokenizer = load_tokenizer(self.model_config)
            if tokenizer is None:
                raise ValueError("structured outputs need a tokenizer; this model has none")
            info = xgr.TokenizerInfo.from_huggingface(
                tokenizer,
                vocab_size=self.vocab_size,
                stop_token_ids=eos_token_ids(self.model_config, tokenizer),
            )
            self._compiler = xgr.GrammarCompiler(info, max_threads=1)
        params = request.sampling_params.structured_outputs
        assert params is not None
        return self._compiler.compile_grammar(build_grammar(params))

    def submit(self, request: Request) -> None:
        self._futures[request.request_id] = self._executor.submit(self._compile, request)

    def poll(self, request: Request) -> bool | str:
        """True once the grammar is ready (its matcher made), False while compiling, or the
        error message when compiling failed."""
        future = self._futures.get(request.request_id)
        if future is None or not future.done():
            return future is None
        del self._futures[request.request_id]
        try:
            compiled = future.result()
        except Exception as e:  # noqa: BLE001 - the request's own grammar; it ends with this error
            return f"the structured output grammar failed to compile: {e}"
        xgr = import_xgrammar()
        matcher = xgr.GrammarMatcher(compiled)
        for token in request.output_token_ids:  # a resumed request: replay what it has
            matcher.accept_token(token)
        self.matchers[request.request_id] = matcher
        return True

    def wait_any(self, timeout: float) -> None:
        """Block up to timeout seconds until some compile finishes (nothing else to run)."""
        from concurrent.futures import FIRST_COMPLETED, wait

        if self._futures:
            wait(list(self._futures.values()), timeout, FIRST_COMPLETED)

    def grammar_bitmask(
        self, requests: list[Request], samples: list[bool]
    ) -> torch.Tensor | None:  # [R, ceil(V / 32)] int32 on the host
        """The step's bitmask, or None when no request sampling this step has a matcher."""
        rows = [
            i
            for i, (r, s) in enumerate(zip(requests, samples))
            if s and r.request_id in self.matchers
        ]
        if not rows:
            return None
        self.accept_pending()
        bitmask = self._bitmask_rows(len(requests))
        rows = [i for i in rows if not self.matchers[requests[i].request_id].is_terminated()]
        if rows:  # on xgrammar's threads, without the GIL
            matchers = [self.matchers[requests[i].request_id] for i in rows]
            if self._batch is None:
                self._batch = import_xgrammar().BatchGrammarMatcher(MAX_FILL_THREADS)
            self._batch.batch_fill_next_token_bitmask(matchers, bitmask, rows)
        return bitmask

    def _bitmask_rows(self, num_rows: int) -> torch.Tensor:
        """The first num_rows rows of the host buffer, every token allowed."""
        words = (self.vocab_size + 31) // 32
        if self._bitmask.shape[0] < num_rows:
            size = max(num_rows, 2 * self._bitmask.shape[0])
            pin = torch.cuda.is_available()
            self._bitmask = torch.empty(size, words, dtype=torch.int32, pin_memory=pin)
        rows = self._bitmask[:num_rows]
        rows.fill_(-1)
        return rows

    def accept(self, request: Request, token_id: int) -> None:
        """Queue the sampled token for the request's matcher (fed before the next fill)."""
        if request.request_id in self.matchers:
            self._pending.append((request.request_id, token_id))

    def accept_pending(self) -> int:
        """Feed the queued tokens to their matchers, in batches of distinct matchers -> how many
        tokens their matchers refused (each logged)."""
        xgr = import_xgrammar()
        refused = 0
        while self._pending:
            batch: dict[str, int] = {}
            rest: list[tuple[str, int]] = []
            for rid, token in self._pending:
                if rid in batch or rest:  # a second token of a matcher waits for the next batch
                    rest.append((rid, token))
                    continue
                matcher = self.matchers.get(rid)
                if matcher is not None and not matcher.is_terminated():
                    batch[rid] = token
            self._pending = rest
            if not batch:
                continue
            matchers = [self.matchers[rid] for rid in batch]
            accepted = xgr.BatchGrammarMatcher.batch_accept_token(matchers, list(batch.values()))
            for (rid, token), ok in zip(batch.items(), accepted):
                if not ok:
                    refused += 1
                    logger.warning("request %s: token %d does not fit its grammar", rid, token)
        return refused

    def forget(self, request_id: str) -> None:
        self.matchers.pop(request_id, None)
        if self._pending:
            self._pending = [(rid, t) for rid, t in self._pending if rid != request_id]
        future = self._futures.pop(request_id, None)
        if future is not None:
            future.cancel()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

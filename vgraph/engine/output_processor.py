"""Frontend output processing: EngineCoreOutputs -> RequestOutputs.

Per engine request (a child of a user request with n samples) it keeps the token ids, the
detokenizer and the logprobs; per user request it gathers the children. Finishing by a stop string
happens here, so the ids of such requests are returned for the caller to abort in the core.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from dataclasses import dataclass, field
from typing import Any

from vgraph.engine.detokenizer import IncrementalDetokenizer
from vgraph.engine.protocol import EngineCoreOutput
from vgraph.outputs import (
    CompletionOutput,
    Logprob,
    RequestMetrics,
    RequestOutput,
    TokenLogprobs,
)
from vgraph.sampling_params import SamplingParams


class OutputKind(enum.Enum):
    FINAL_ONLY = 0  # one RequestOutput when every sample is done (offline generate)
    DELTA = 1  # new tokens and text since the last output (streaming)


@dataclass
class ChildState:
    request_id: str
    index: int
    params: SamplingParams
    detok: IncrementalDetokenizer | None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, Logprob]] | None = None
    cumulative_logprob: float | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    num_sent_tokens: int = 0
    final_sent: bool = False
    num_cached_tokens: int = 0  # prompt tokens the engine found in the prefix cache


@dataclass
class ParentState:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    kind: OutputKind
    children: list[ChildState]
    metrics: RequestMetrics
    error: str | None = None
    # prompt logprobs as the first child's chunks report them (the n children score alike)
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None

    @property
    def finished(self) -> bool:
        return all(c.finish_reason is not None for c in self.children)


class OutputProcessor:
    def __init__(self, tokenizer: Any | None) -> None:
        self.tokenizer = tokenizer
        self.backend_tokenizer = getattr(tokenizer, "backend_tokenizer", None)
        self.parents: dict[str, ParentState] = {}
        self.child_to_parent: dict[str, ParentState] = {}

    def add_request(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int],
        child_ids: list[str],
        params: list[SamplingParams],
        kind: OutputKind,
    ) -> None:
        children = []
        for i, (cid, p) in enumerate(zip(child_ids, params)):
            detok = None
            if self.backend_tokenizer is not None:
                detok = IncrementalDetokenizer(self.backend_tokenizer, prompt_token_ids, p)
            child = ChildState(cid, i, p, detok)
            if p.logprobs is not None:
                child.logprobs, child.cumulative_logprob = [], 0.0
            children.append(child)
        metrics = RequestMetrics(arrival_time=time.time())
        parent = ParentState(request_id, prompt, prompt_token_ids, kind, children, metrics)
        if params and params[0].prompt_logprobs is not None:
            parent.prompt_logprobs = [None]
        self.parents[request_id] = parent
        for c in children:
            self.child_to_parent[c.request_id] = parent

    def has_unfinished(self) -> bool:
        return bool(self.parents)

    def child_ids(self, request_id: str) -> list[str]:
        parent = self.parents.get(request_id)
        return [] if parent is None else [c.request_id for c in parent.children]

    def process_outputs(
        self, outputs: list[EngineCoreOutput]
    ) -> tuple[list[RequestOutput], list[str]]:
        """Returns the RequestOutputs to hand out and the engine request ids to abort."""
        touched: dict[str, ParentState] = {}
        to_abort: list[str] = []
        now = time.time()
        for out in outputs:
            parent = self.child_to_parent.get(out.request_id)
            if parent is None:  # aborted by the frontend while the step ran
                continue
            child = parent.children[[c.request_id for c in parent.children].index(out.request_id)]
            if child.finish_reason is not None:  # stopped here by a stop string; the core ran on
                continue
            if out.new_prompt_logprobs and child.index == 0 and parent.prompt_logprobs is not None:
                parent.prompt_logprobs.extend(map(self._logprob_dict, out.new_prompt_logprobs))
            if self._update_child(child, out):
                to_abort.append(child.request_id)
            if out.new_token_ids:
                if parent.metrics.first_token_time is None:
                    parent.metrics.first_token_time = now
                parent.metrics.last_token_time = now
            if out.error is not None:
                parent.error = out.error
            touched[parent.request_id] = parent
        results = []
        for parent in touched.values():
            ro = self._make_output(parent)
            if ro is not None:
                results.append(ro)
            if parent.finished:
                self._forget(parent)
        return results, to_abort

    def abort(self, request_id: str, reason: str = "abort") -> RequestOutput | None:
        """Finish a user request in the frontend; returns its final output, if it was known."""
        parent = self.parents.get(request_id)
        if parent is None:
            return None
        for c in parent.children:
            if c.finish_reason is None:
                c.finish_reason = reason
        ro = self._make_output(parent)
        self._forget(parent)
        return ro

    def _forget(self, parent: ParentState) -> None:
        self.parents.pop(parent.request_id, None)
        for c in parent.children:
            self.child_to_parent.pop(c.request_id, None)

    def _update_child(self, child: ChildState, out: EngineCoreOutput) -> bool:
        """Apply one engine output; True if a stop string finished the child while the core
        still runs it (the caller aborts it there)."""
        child.token_ids.extend(out.new_token_ids)
        child.num_cached_tokens = max(child.num_cached_tokens, out.num_cached_tokens)
        if out.new_logprobs and child.logprobs is not None:
            for lp in out.new_logprobs:
                child.logprobs.append(self._logprob_dict(lp))
                child.cumulative_logprob += lp.logprobs[0]
        if child.detok is not None and out.finish_reason != "error":
            ids = out.new_token_ids
            if out.finish_reason == "stop" and not child.params.include_stop_str_in_output:
                ids = ids[:-1]  # the EOS / stop token id that ended it: kept in ids, not in text
            stop = child.detok.update(ids)
            if stop is not None:  # the text ends at a stop string, whatever else ended it
                child.finish_reason, child.stop_reason = "stop", stop
                return out.finish_reason is None
        if out.finish_reason is not None:
            child.finish_reason, child.stop_reason = out.finish_reason, out.stop_reason
        return False

    def _logprob_dict(self, lp: TokenLogprobs) -> dict[int, Logprob]:
        entries: dict[int, Logprob] = {}
        for pos, (tid, value) in enumerate(zip(lp.token_ids, lp.logprobs)):
            if tid in entries:
                continue
            rank = lp.rank if pos == 0 else pos
            entries[tid] = Logprob(value, rank, self._decode_one(tid))
        return entries

    def _decode_one(self, token_id: int) -> str | None:
        if self.tokenizer is None:
            return None
        return self.tokenizer.decode([token_id])

    def _make_output(self, parent: ParentState) -> RequestOutput | None:
        if parent.kind is OutputKind.FINAL_ONLY:
            if not parent.finished:
                return None
            completions = [self._completion(c, delta=False) for c in parent.children]
        else:
            completions = []
            for c in parent.children:
                if len(c.token_ids) > c.num_sent_tokens or c.finish_reason is not None:
                    comp = self._completion(c, delta=True)
                    if comp is not None:
                        completions.append(comp)
        if parent.finished and parent.metrics.finished_time is None:
            parent.metrics.finished_time = time.time()
        return RequestOutput(
            request_id=parent.request_id,
            prompt=parent.prompt,
            prompt_token_ids=parent.prompt_token_ids,
            outputs=completions,
            finished=parent.finished,
            error=parent.error,
            metrics=dataclasses.replace(parent.metrics),  # a snapshot: later outputs move on
            num_cached_tokens=parent.children[0].num_cached_tokens,
            prompt_logprobs=parent.prompt_logprobs,
        )

    def _completion(self, c: ChildState, delta: bool) -> CompletionOutput | None:
        finished = c.finish_reason is not None
        if not delta:
            text = "" if c.detok is None else c.detok.output_text
            return CompletionOutput(
                c.index,
                text,
                list(c.token_ids),
                c.cumulative_logprob,
                c.logprobs,
                c.finish_reason,
                c.stop_reason,
            )
        if c.final_sent:
            return None
        start = c.num_sent_tokens
        c.num_sent_tokens = len(c.token_ids)
        text = "" if c.detok is None else c.detok.delta(finished)
        if finished:
            c.final_sent = True
        return CompletionOutput(
            c.index,
            text,
            c.token_ids[start:],
            c.cumulative_logprob,
            None if c.logprobs is None else c.logprobs[start:],
            c.finish_reason,
            c.stop_reason,
        )

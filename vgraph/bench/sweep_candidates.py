"""The sweep's candidates: capture lists named on the command line (explicit or generated) and the
(mode, list, piecewise list) combinations built from them. No engine is started here.

List specs: `1,2,4,8` (explicit), `default` (the default list for this max_num_seqs and token
budget), `pow2` / `pow2:N` (powers of two up to N; bare: up to the first one holding the
workload's largest batch), `all` / `all:N` (every size 1..N; bare: N = the workload's largest
batch) and `recommended` (the optimiser's list, known only after the first measurements).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vgraph.config import CompilationConfig
from vgraph.config.compilation import resolve_capture_sizes
from vgraph.config.modes import CUDAGraphMode

RECOMMENDED = "recommended"
LIST_FORMS = "'1,2,4,8', 'default', 'pow2', 'pow2:N', 'all', 'all:N' or 'recommended'"


@dataclass
class Candidate:
    """One candidate of the sweep: a mode and its capture lists (None: the mode's default or,
    for the eager baseline, nothing), and everything measured for it."""

    mode: str
    list_name: str
    sizes: tuple[int, ...] | None
    piecewise_name: str | None = None
    piecewise_sizes: tuple[int, ...] | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        if self.mode == "NONE":
            return "NONE"
        pw = "" if self.piecewise_name is None else f" pw={self.piecewise_name}"
        return f"{self.mode}:{self.list_name}{pw}"

    def compilation_config(self) -> dict[str, Any]:
        cc: dict[str, Any] = {"cudagraph_mode": self.mode}
        if self.sizes is not None:
            cc["cudagraph_capture_sizes"] = list(self.sizes)
        if self.piecewise_sizes is not None:
            cc["piecewise_capture_sizes"] = list(self.piecewise_sizes)
        return cc


def default_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    return tuple(resolve_capture_sizes(CompilationConfig(), max_num_seqs, max_num_batched_tokens))


def parse_list(spec: str, flag: str, max_batch: int, default: tuple[int, ...]) -> tuple[int, ...]:
    """A list spec (not `recommended`) -> sorted sizes; ValueError names the flag and forms."""
    name, _, arg = spec.partition(":")
    try:
        if name == "default" and not arg:
            return default
        if name in ("pow2", "all"):
            top = int(arg) if arg else max_batch
            if top < 1:
                raise ValueError
            if name == "all":
                return tuple(range(1, top + 1))
            sizes = [1]
            while sizes[-1] < top and (arg == "" or sizes[-1] * 2 <= top):
                sizes.append(sizes[-1] * 2)
            return tuple(sizes)
        sizes = sorted({int(x) for x in spec.split(",")})
        if sizes[0] < 1:
            raise ValueError
        return tuple(sizes)
    except ValueError:
        raise ValueError(
            f"{flag}: {spec!r} is not a capture list; use {LIST_FORMS} (sizes >= 1)"
        ) from None


def build_candidates(
    modes: list[str],
    lists: list[str],
    pw_lists: list[str] | None,
    max_batch: int,
    default: tuple[int, ...],
    all_max: int,
) -> list[Candidate]:
    """NONE first (the eager baseline), then every mode x list (x piecewise list, for modes that
    capture piecewise graphs: PIECEWISE takes the piecewise lists as its lists; for
    FULL_AND_PIECEWISE they are a second axis). `recommended` candidates get their sizes later;
    a mode with one also gets `all:<all_max>` (every size of the measured batch range), the
    measurement the optimiser needs. ValueError on a bad mode or list, or a candidate given
    twice."""
    for m in modes:
        CUDAGraphMode.parse(m)  # ValueError names the mode and the allowed ones
    for flag, specs in (("--modes", modes), ("--lists", lists), ("--piecewise-lists", pw_lists)):
        repeated = sorted({s for s in specs or [] if specs.count(s) > 1})
        if repeated:
            raise ValueError(f"{flag}: {', '.join(repeated)} given more than once")
    named = {
        s: None if s == RECOMMENDED else parse_list(s, "--lists", max_batch, default) for s in lists
    }
    pw_named = {s: parse_list(s, "--piecewise-lists", max_batch, default) for s in pw_lists or []}
    cands = [Candidate("NONE", "eager", None)]
    for mode in (m.upper() for m in modes):
        if mode == "NONE":
            continue
        has_pw = CUDAGraphMode.parse(mode).needs_piecewise()
        if mode == "PIECEWISE" and pw_named:
            pairs = [(name, sizes, None, None) for name, sizes in pw_named.items()]
        elif has_pw and pw_named:
            pairs = [(n, s, pn, ps) for n, s in named.items() for pn, ps in pw_named.items()]
        else:
            pairs = [(name, sizes, None, None) for name, sizes in named.items()]
        every = tuple(range(1, all_max + 1))
        if any(p[0] == RECOMMENDED for p in pairs) and every not in named.values():
            pairs.append((f"all:{all_max}", every, None, None))
        cands += [Candidate(mode, *p) for p in pairs]
    seen: dict[tuple, str] = {}
    for c in cands:
        key = (c.mode, c.list_name if c.sizes is None else c.sizes, c.piecewise_sizes)
        if key in seen:
            raise ValueError(
                f"candidates {seen[key]} and {c.name} are the same; list each capture list once"
            )
        seen[key] = c.name
    return cands

"""StructuredOutputsParams -> an xgrammar Grammar, with a user's mistake named.

The frontend calls check_grammar() before a request is queued, so a bad JSON schema, regex or
EBNF grammar is a ValueError (HTTP 400) naming the field and xgrammar's reason; the engine core
compiles the same Grammar against the tokenizer (manager.py). Nothing here needs a tokenizer or
the device. JSON is generated compact (no free whitespace). xgrammar is an optional dependency
(`pip install vgraph[structured]`), imported on first use.
"""

from __future__ import annotations

import json
from typing import Any

from vgraph.sampling_params import SamplingParamsError, StructuredOutputsParams

_MAX_REASON = 300  # characters of xgrammar's message quoted in an error


def import_xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError:
        raise ValueError(
            "structured outputs need the xgrammar package, which is not installed; "
            "install it with `pip install 'vgraph[structured]'`"
        ) from None
    return xgrammar


def build_grammar(params: StructuredOutputsParams) -> Any:
    """The xgrammar.Grammar of these params; SamplingParamsError names what does not parse."""
    xgr = import_xgrammar()
    kind = params.kinds()[0]
    try:
        if kind in ("json", "json_object"):
            text = params.json if kind == "json" else '{"type": "object"}'
            assert isinstance(text, str)
            if not isinstance(json.loads(text), (dict, bool)):
                raise ValueError("a JSON schema is an object (or true / false)")
            # compact JSON: no free whitespace for a weak model to loop in (vLLM's
            # disable-any-whitespace); strict: no properties beyond the schema's
            return xgr.Grammar.from_json_schema(text, any_whitespace=False, strict_mode=True)
        if kind == "regex":
            return xgr.Grammar.from_regex(params.regex)
        if kind == "choice":
            # each choice as a JSON string literal: the EBNF escapes are JSON's
            alternatives = " | ".join(
                json.dumps(c, ensure_ascii=False) for c in params.choice or []
            )
            return xgr.Grammar.from_ebnf(f"root ::= {alternatives}")
        return xgr.Grammar.from_ebnf(params.grammar)
    except (RuntimeError, ValueError, TypeError) as e:
        reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        # xgrammar prefixes "[time] file.cc:line: "; the reason is what follows
        reason = reason.split(": ", 1)[1] if reason.startswith("[") and ": " in reason else reason
        raise SamplingParamsError(
            f"structured_outputs.{kind}",
            getattr(params, kind),
            f"a valid {_WHAT[kind]} ({reason[:_MAX_REASON]})",
        ) from None


_WHAT = {
    "json": "JSON schema",
    "regex": "regular expression",
    "choice": "list of strings",
    "grammar": "EBNF grammar (GBNF syntax)",
    "json_object": "JSON object grammar",
}


def check_grammar(params: StructuredOutputsParams) -> None:
    """Raise SamplingParamsError (a ValueError) if these params cannot become a grammar."""
    build_grammar(params)

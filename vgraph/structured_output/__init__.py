"""Structured outputs through xgrammar: grammars from StructuredOutputsParams (grammar.py) and the
engine core's compiler, matchers and token bitmasks (manager.py)."""

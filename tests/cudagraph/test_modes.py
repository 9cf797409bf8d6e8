"""Mode resolution: every requested mode x backend support x piecewise availability."""

from __future__ import annotations

import logging

import pytest

from vgraph.config.compilation import resolve_cudagraph_mode
from vgraph.config.modes import RUNTIME_MODES
from vgraph.config.modes import AttentionCGSupport as S
from vgraph.config.modes import CUDAGraphMode as M

# (requested, support, piecewise available) -> expected; unlisted combinations keep the request
EXPECTED = {
    (M.FULL, S.NEVER, True): M.PIECEWISE,
    (M.FULL, S.NEVER, False): M.NONE,
    (M.FULL, S.UNIFORM_SINGLE_TOKEN_DECODE, True): M.FULL_AND_PIECEWISE,
    (M.FULL, S.UNIFORM_SINGLE_TOKEN_DECODE, False): M.FULL_DECODE_ONLY,
    (M.FULL_DECODE_ONLY, S.NEVER, True): M.PIECEWISE,
    (M.FULL_DECODE_ONLY, S.NEVER, False): M.NONE,
    (M.FULL_AND_PIECEWISE, S.NEVER, True): M.PIECEWISE,
    (M.FULL_AND_PIECEWISE, S.NEVER, False): M.NONE,
    (M.FULL_AND_PIECEWISE, S.UNIFORM_SINGLE_TOKEN_DECODE, False): M.FULL_DECODE_ONLY,
    (M.FULL_AND_PIECEWISE, S.ALWAYS, False): M.FULL,
    (M.PIECEWISE, S.NEVER, False): M.NONE,
    (M.PIECEWISE, S.UNIFORM_SINGLE_TOKEN_DECODE, False): M.NONE,
    (M.PIECEWISE, S.ALWAYS, False): M.NONE,
}


@pytest.mark.parametrize("piecewise", [True, False])
@pytest.mark.parametrize("support", list(S))
@pytest.mark.parametrize("requested", list(M))
def test_resolution_matrix(requested, support, piecewise, caplog):
    expected = EXPECTED.get((requested, support, piecewise), requested)
    with caplog.at_level(logging.WARNING, logger="vgraph.config.compilation"):
        got = resolve_cudagraph_mode(requested, "fake", support, piecewise)
    assert got is expected
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    if expected is requested:
        assert warnings == []
    else:
        assert len(warnings) == 1
        msg = warnings[0].getMessage()
        assert "'fake'" in msg and support.name in msg and expected.name in msg


def test_mode_halves():
    assert M.FULL_DECODE_ONLY.decode_mode() is M.FULL
    assert M.FULL_DECODE_ONLY.mixed_mode() is M.NONE
    assert M.FULL_AND_PIECEWISE.decode_mode() is M.FULL
    assert M.FULL_AND_PIECEWISE.mixed_mode() is M.PIECEWISE
    for m in RUNTIME_MODES:
        assert m.decode_mode() is m and m.mixed_mode() is m


@pytest.mark.parametrize("name", ["full", "Full_Decode_Only", "PIECEWISE", "none"])
def test_parse_case_insensitive(name):
    assert M.parse(name).name == name.upper()


def test_parse_rejects_unknown():
    with pytest.raises(ValueError, match="cudagraph_mode='fast'.*FULL_AND_PIECEWISE"):
        M.parse("fast")

"""Dispatcher keys and padding for several capture lists and modes."""

from __future__ import annotations

import pytest

from vgraph.config.modes import AttentionCGSupport as S
from vgraph.config.modes import CUDAGraphMode as M
from vgraph.cudagraph.dispatcher import BatchDescriptor as BD
from vgraph.cudagraph.dispatcher import CudagraphDispatcher, EagerReason


@pytest.mark.parametrize(
    "sizes, n, padded",
    [
        ([1, 2, 4, 8], 3, 4),
        ([1, 2, 4, 8], 8, 8),
        ([1, 2, 4, 8], 9, None),
        ([16, 4, 64], 1, 4),
        ([16, 4, 64], 17, 64),
        ([5], 5, 5),
        ([5], 6, None),
    ],
)
def test_padding_to_smallest_capture_size(sizes, n, padded):
    d = CudagraphDispatcher(M.FULL_DECODE_ONLY, sizes, S.UNIFORM_SINGLE_TOKEN_DECODE, 256)
    assert d.padded_size(n) == padded


def test_full_decode_only_keys_and_dispatch():
    d = CudagraphDispatcher(M.FULL_DECODE_ONLY, [1, 2, 4, 8, 16], S.UNIFORM_SINGLE_TOKEN_DECODE, 8)
    # decode keys only up to max_num_reqs (8); no piecewise keys
    assert d.keys[M.FULL] == {BD(s, s, True) for s in (1, 2, 4, 8)}
    assert d.keys[M.PIECEWISE] == set()
    assert d.dispatch(3, uniform_decode=True) == (M.FULL, BD(4, 4, True), None)
    assert d.dispatch(3, uniform_decode=False) == (M.NONE, None, EagerReason.UNSUPPORTED)
    assert d.dispatch(17, uniform_decode=False) == (M.NONE, None, EagerReason.ABOVE_MAX_SIZE)


def test_full_and_piecewise_prefers_full_for_decode():
    d = CudagraphDispatcher(M.FULL_AND_PIECEWISE, [1, 2, 4, 8], S.UNIFORM_SINGLE_TOKEN_DECODE, 64)
    assert d.dispatch(5, True) == (M.FULL, BD(8, 8, True), None)
    assert d.dispatch(5, False) == (M.PIECEWISE, BD(8), None)


def test_full_with_always_backend_uses_relaxed_keys_for_mixed():
    d = CudagraphDispatcher(M.FULL, [4, 8], S.ALWAYS, 64)
    assert BD(8) in d.keys[M.FULL] and BD(8, 8, True) in d.keys[M.FULL]
    assert d.dispatch(6, False) == (M.FULL, BD(8), None)
    assert d.dispatch(6, True) == (M.FULL, BD(8, 8, True), None)


def test_piecewise_keys_and_none_mode():
    d = CudagraphDispatcher(M.PIECEWISE, [1, 2, 4], S.NEVER, 64)
    assert d.keys[M.FULL] == set()
    assert d.dispatch(1, True) == (M.PIECEWISE, BD(1), None)
    none = CudagraphDispatcher(M.NONE, [1, 2, 4], S.ALWAYS, 64)
    assert none.dispatch(1, True) == (M.NONE, None, None)
    assert none.capture_keys() == []


def test_capture_order_full_first_largest_first():
    d = CudagraphDispatcher(M.FULL_AND_PIECEWISE, [1, 4, 2], S.UNIFORM_SINGLE_TOKEN_DECODE, 64)
    assert d.capture_keys() == [
        (M.FULL, BD(4, 4, True)),
        (M.FULL, BD(2, 2, True)),
        (M.FULL, BD(1, 1, True)),
        (M.PIECEWISE, BD(4)),
        (M.PIECEWISE, BD(2)),
        (M.PIECEWISE, BD(1)),
    ]


def test_piecewise_sizes_are_their_own_list():
    d = CudagraphDispatcher(
        M.FULL_AND_PIECEWISE, [1, 2, 4], S.UNIFORM_SINGLE_TOKEN_DECODE, 64, piecewise_sizes=[8, 32]
    )
    assert d.keys[M.PIECEWISE] == {BD(8), BD(32)}
    assert d.keys[M.FULL] == {BD(s, s, True) for s in (1, 2, 4)}
    assert d.dispatch(3, True) == (M.FULL, BD(4, 4, True), None)  # the full list pads decodes
    assert d.dispatch(3, False) == (M.PIECEWISE, BD(8), None)  # the piecewise list pads mixed
    assert d.dispatch(6, True) == (M.PIECEWISE, BD(8), None)  # above the full list: pieces
    assert d.dispatch(33, False) == (M.NONE, None, EagerReason.ABOVE_MAX_SIZE)
    keys = d.capture_keys()
    assert keys[-2:] == [(M.PIECEWISE, BD(32)), (M.PIECEWISE, BD(8))]


def test_restricted_dispatches_as_its_own_list_over_the_union():
    """A dispatcher restricted to a subset of the union's sizes pads and falls back as one built
    for that subset alone, and picks only keys of the union."""
    union = CudagraphDispatcher(
        M.FULL_AND_PIECEWISE, [1, 2, 3, 4, 8], S.UNIFORM_SINGLE_TOKEN_DECODE, 8, [2, 4, 16]
    )
    four = union.restricted([4], [16])
    alone = CudagraphDispatcher(M.FULL_AND_PIECEWISE, [4], S.UNIFORM_SINGLE_TOKEN_DECODE, 8, [16])
    every = [1, 2, 3, 4, 8]
    for n in range(1, 18):
        for uniform in (True, False):
            assert four.dispatch(n, uniform) == alone.dispatch(n, uniform)
    assert four.dispatch(3, True) == (M.FULL, BD(4, 4, True), None)  # 3 pads to 4 ...
    assert union.restricted(every, [2, 4, 16]).dispatch(3, True) == (M.FULL, BD(3, 3, True), None)
    assert four.dispatch(5, True) == (M.PIECEWISE, BD(16), None)  # ... not to the union's 8
    assert four.keys[M.FULL] <= union.keys[M.FULL]
    assert four.capture_keys() == [(M.FULL, BD(4, 4, True)), (M.PIECEWISE, BD(16))]
    with pytest.raises(ValueError, match=r"FULL graphs \[BatchDescriptor\(num_tokens=6"):
        union.restricted([1, 6], [2])
    with pytest.raises(ValueError, match="PIECEWISE graphs"):
        union.restricted([1], [1])
    eager = CudagraphDispatcher(M.NONE, [], S.ALWAYS, 8).restricted([1, 2])
    assert eager.dispatch(2, True) == (M.NONE, None, None)


def test_graph_stats_count_decode_batch_sizes():
    from vgraph.cudagraph.counters import GraphStats

    g = GraphStats()
    g.record_step(M.FULL, None, 3, 4, True)
    g.record_step(M.FULL, None, 3, 4, True)
    g.record_step(M.NONE, EagerReason.ABOVE_MAX_SIZE, 600, 600, True)
    g.record_step(M.PIECEWISE, None, 5, 8, False)  # mixed: not a decode batch
    assert g.decode_batch_sizes == {3: 2, 600: 1}
    assert g.padded_decode_batch_sizes == {4: 2, 600: 1}
    assert g.padded_tokens == 2 + 3 and g.steps == {"NONE": 1, "PIECEWISE": 1, "FULL": 2}


def test_cascade_steps_never_run_full():
    """A cascade step takes PIECEWISE where pieces exist, else NONE; reason CASCADE only where
    FULL was its key."""
    fp = CudagraphDispatcher(M.FULL_AND_PIECEWISE, [1, 2, 4, 8], S.UNIFORM_SINGLE_TOKEN_DECODE, 64)
    assert fp.dispatch(5, True, use_cascade=True) == (M.PIECEWISE, BD(8), EagerReason.CASCADE)
    assert fp.dispatch(5, False, use_cascade=True) == (M.PIECEWISE, BD(8), None)  # never FULL
    fdo = CudagraphDispatcher(M.FULL_DECODE_ONLY, [1, 2, 4, 8], S.UNIFORM_SINGLE_TOKEN_DECODE, 8)
    assert fdo.dispatch(3, True, use_cascade=True) == (M.NONE, None, EagerReason.CASCADE)
    full = CudagraphDispatcher(M.FULL, [4, 8], S.ALWAYS, 64)
    assert full.dispatch(6, False, use_cascade=True) == (M.NONE, None, EagerReason.CASCADE)
    assert full.dispatch(9, True, use_cascade=True) == (M.NONE, None, EagerReason.ABOVE_MAX_SIZE)
    pw = CudagraphDispatcher(M.PIECEWISE, [1, 2, 4], S.NEVER, 64)
    assert pw.dispatch(3, True, use_cascade=True) == (M.PIECEWISE, BD(4), None)
    none = CudagraphDispatcher(M.NONE, [1, 2, 4], S.ALWAYS, 64)
    assert none.dispatch(3, True, use_cascade=True) == (M.NONE, None, None)

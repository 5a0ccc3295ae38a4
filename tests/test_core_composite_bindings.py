"""The composite operations of ``ukv._core.Arena`` (API.md §5) through the bindings:
argument conversion, results, and the error classes. The semantics are tested in the
core (``rust/ukv-core/tests/composite.rs``, ``model.rs``); this file pins the Python
surface the composite allocators build on."""

from __future__ import annotations

import numpy as np
import pytest

from ukv import _core
from ukv.errors import ArgumentError, DoubleFreeError, InvalidIdError

FULL, SWA = 0, 1


def _swa_arena(lazy: bool = False) -> _core.Arena:
    """Full up (128 B entries, page size 2), swa down (64 B), binding full's ids."""
    pools = [("full", 128, 2, "up", None), ("swa", 64, 2, "down", FULL)]
    return _core.Arena(12 * 256 + 12 * 128, pools, lazy=lazy)


def test_joint_alloc_binds_both_sides_and_is_exact() -> None:
    a = _swa_arena()
    joint = a.joint_schedulable_pages(FULL, SWA)
    assert joint == a.joint_available_pages(FULL, SWA) > 0
    ids = a.swa_alloc(FULL, SWA, 4)
    assert ids is not None and ids.dtype == np.int64 and len(ids) == 4
    pages = np.unique(ids // 2)
    assert (a.v2p(FULL)[pages] > 0).all() and (a.v2p(SWA)[pages] > 0).all()
    left = a.joint_schedulable_pages(FULL, SWA)
    assert a.swa_alloc(FULL, SWA, 2 * (left + 1)) is None
    assert a.swa_alloc(FULL, SWA, 2 * left) is not None
    a.check_invariants()


def test_joint_extend_and_decode_return_tokens() -> None:
    a = _swa_arena()
    res = a.swa_alloc_extend(FULL, SWA, np.array([0]), np.array([3]), np.array([-1]))
    assert res is not None
    toks, req = res
    assert len(toks) == 3 and req is None
    res = a.swa_alloc_decode(FULL, SWA, np.array([4], dtype=np.int32), np.array([toks[-1]]))
    assert res is not None and res[0].tolist() == [toks[-1] + 1]


def test_free_and_window_free() -> None:
    a = _swa_arena()
    ids = a.swa_alloc(FULL, SWA, 4)
    assert ids is not None
    page = ids[0] // 2
    a.swa_free_nonowner(FULL, SWA, ids[:1])
    assert a.v2p(SWA)[page] == _core.TOMBSTONE and a.v2p(FULL)[page] > 0
    a.swa_free_nonowner(FULL, SWA, ids[:2])  # the released page is skipped
    with pytest.raises(DoubleFreeError, match="full"):
        a.swa_free_nonowner(FULL, SWA, np.array([30]))  # never allocated
    with pytest.raises(InvalidIdError, match="-5"):
        a.swa_free_nonowner(FULL, SWA, np.array([-5]))
    a.swa_free(FULL, SWA, ids)
    assert (a.v2p(FULL)[np.unique(ids // 2)] == _core.TOMBSTONE).all()
    a.check_invariants()


def test_bad_pairs_raise_argument_errors() -> None:
    a = _swa_arena()
    for call in (
        lambda: a.swa_alloc(SWA, FULL, 2),
        lambda: a.joint_available_pages(SWA, FULL),
        lambda: a.joint_schedulable_pages(FULL, 7),
        lambda: a.swa_free(FULL, FULL, np.array([2])),
    ):
        with pytest.raises(ArgumentError):
            call()


def test_translate_slots_and_shortage() -> None:
    pools = [("full", 64, 1, "up", None), ("mamba", 160, 1, "down", None)]
    a = _core.Arena(64 * 64 + 16 * 160, pools)
    slots = a.alloc(1, 3)
    assert slots is not None
    a.free(1, slots[1:2])
    out = a.translate_slots(1, np.array([slots[0], -1, slots[1]], dtype=np.int32))
    assert out.tolist() == [a.v2p(1)[slots[0]], -1, -1]
    with pytest.raises(InvalidIdError, match="-3"):
        a.translate_slots(1, np.array([-3]))
    assert a.alloc(0, a.available_pages(0)) is not None
    assert a.shortage_pages(1, 0, 0) == 0
    r = a.shortage_pages(1, 2, 0)
    assert r is not None and r > 0
    assert a.shortage_pages(1, 10**6, 0) is None
    with pytest.raises(ArgumentError):
        a.shortage_pages(1, 1, 1)


def test_middle_band_move_order() -> None:
    pools = [
        ("kv", 48, 1, "up", None),
        ("mid", 160, 1, "middle", None),
        ("st", 80, 1, "down", None),
    ]
    a = _core.Arena(4800, pools)
    assert a.move_order() == [0, 2, 1]
    assert a.pool_info(1)["grow"] == "middle"
    two = _swa_arena()
    assert two.move_order() == [FULL, SWA]

"""The public surface of the allocator API: error classes, table shapes and addresses,
``out=`` identity and id dtypes (API.md §3, §4, §6)."""

from __future__ import annotations

import pytest
import torch

import ukv
import ukv._core
import ukv.errors

ERROR_NAMES = [
    "UkvError",
    "PoolConfigError",
    "InvalidIdError",
    "DoubleFreeError",
    "ArgumentError",
    "InvariantError",
    "PoolPoisonedError",
]


@pytest.mark.parametrize("name", ERROR_NAMES)
def test_error_classes_are_shared_with_the_native_module(name) -> None:
    cls = getattr(ukv.errors, name)
    assert getattr(ukv._core, name) is cls
    assert getattr(ukv, name) is cls
    assert name in ukv.errors.__all__
    assert issubclass(cls, ukv.errors.UkvError)


PYTHON_ONLY_ERRORS = ["DeferredFreeError"]  # raised by the Python layer, never by the core


def test_every_exported_error_is_checked() -> None:
    assert set(ukv.errors.__all__) == set(ERROR_NAMES) | set(PYTHON_ONLY_ERRORS)


def test_deferred_free_error_is_a_double_free_error() -> None:
    cls = ukv.DeferredFreeError
    assert cls is ukv.errors.DeferredFreeError
    assert issubclass(cls, ukv.errors.DoubleFreeError) and issubclass(cls, IndexError)


@pytest.mark.parametrize(
    "name,bases",
    [
        ("UkvError", (Exception,)),
        ("PoolConfigError", (ukv.errors.UkvError, ValueError)),
        ("InvalidIdError", (ukv.errors.UkvError, IndexError)),
        ("DoubleFreeError", (ukv.errors.InvalidIdError, ukv.errors.UkvError, IndexError)),
        ("ArgumentError", (ukv.errors.UkvError, ValueError)),
        ("InvariantError", (ukv.errors.UkvError, AssertionError)),
        ("PoolPoisonedError", (ukv.errors.UkvError,)),
    ],
)
def test_error_bases(name, bases) -> None:
    cls = getattr(ukv.errors, name)
    for base in bases:
        assert issubclass(cls, base), f"{name} is not a {base.__name__}"


def test_error_bases_are_distinct() -> None:
    E = ukv.errors
    assert not issubclass(E.PoolConfigError, IndexError)
    assert not issubclass(E.InvalidIdError, ValueError)
    assert not issubclass(E.ArgumentError, IndexError)
    assert not issubclass(E.DoubleFreeError, ValueError)
    assert not issubclass(E.InvariantError, ValueError)


def test_native_errors_are_catchable_by_builtin_class() -> None:
    pool, fa, _ = make_pool()
    a = fa.alloc(2)
    fa.free(a)
    with pytest.raises(IndexError):  # DoubleFreeError from the core
        fa.free(a)
    with pytest.raises(ValueError):  # ArgumentError from Python validation
        fa.alloc(-1)
    with pytest.raises(ValueError):  # PoolConfigError
        ukv.UnifiedKVPool(0, list(specs()), device="cpu")


# ------------------------------------------------------------------------------ tables


def specs(full_grow: str = "up"):
    other = "down" if full_grow == "up" else "up"
    full = ukv.MHASpec("full", 2, 2, 4, torch.float16, grow=full_grow)
    mamba = ukv.MambaSpec(
        "mamba", 2, ((4, 3),), torch.float32, (2, 2, 2), torch.float32, grow=other
    )
    return full, mamba


def make_pool(page_size: int = 1, device: str = "cpu", lazy: bool = False, full_grow: str = "up"):
    full, mamba = specs(full_grow)
    total = 64 * page_size * full.entry_bytes + 16 * mamba.entry_bytes
    pool = ukv.UnifiedKVPool(total, [full, mamba], page_size=page_size, device=device, lazy=lazy)
    return pool, pool.allocator("full"), pool.allocator("mamba")


POOLS = [
    pytest.param(dict(page_size=1), id="ps1"),
    pytest.param(dict(page_size=8), id="ps8"),
    pytest.param(dict(page_size=8, lazy=True), id="ps8-lazy"),
    pytest.param(dict(page_size=1, full_grow="down"), id="ps1-full-down"),
    pytest.param(dict(page_size=4, device="meta", lazy=True), id="ps4-meta-lazy"),
]


def assert_table_shape(alloc) -> None:
    for t in (alloc.v2p, alloc.p2v):
        assert t.dtype == torch.int64 and t.dim() == 1
        assert t.numel() == alloc.num_pages + 1
        assert int(t[0]) == 0 and int(t[-1]) == -1


@pytest.mark.parametrize("kw", POOLS)
def test_tables_shape_anchor_and_sentinel(kw) -> None:
    pool, fa, ma = make_pool(**kw)
    for alloc in (fa, ma):
        assert_table_shape(alloc)
        assert (alloc.v2p[1:-1] == -1).all() and (alloc.p2v[1:-1] == -1).all()
        # tables live on the pool's device (the host for a meta pool)
        want = "cpu" if pool.device.type == "meta" else pool.device.type
        assert alloc.v2p.device.type == want
    assert ma.page_size == 1 and fa.page_size == kw["page_size"]


@pytest.mark.parametrize("kw", POOLS)
def test_table_addresses_never_change(kw) -> None:
    pool, fa, ma = make_pool(**kw)
    ptrs = {(a.name, t): getattr(a, t).data_ptr() for a in (fa, ma) for t in ("v2p", "p2v")}

    def same() -> None:
        for a in (fa, ma):
            for t in ("v2p", "p2v"):
                assert getattr(a, t).data_ptr() == ptrs[(a.name, t)], f"{a.name}.{t} moved"
            assert_table_shape(a)

    for round_ in range(4):
        for a in (fa, ma):
            live = [a.alloc(a.page_size * k) for k in (1, 3, 2, 4)]
            same()
            a.free(live[1])
            a.free_group_begin()
            a.free(live[0])
            a.free(live[3])
            a.free_group_end()
            same()
            s = torch.tensor([a.page_size + 1])
            a.alloc_decode(s, s, live[2][-1:] if a.page_size > 1 else torch.tensor([-1]))
            same()
        pool.flush(urgent=round_ % 2 == 0)
        same()
        pool.check_invariants()
        (fa if round_ % 2 else ma).clear()
        same()
    fa.clear()
    ma.clear()
    same()
    assert (fa.v2p[1:-1] == -1).all() and (ma.p2v[1:-1] == -1).all()


@pytest.mark.parametrize("kw", POOLS)
def test_translate_out_returns_the_buffer_itself(kw) -> None:
    pool, fa, ma = make_pool(**kw)
    for a in (fa, ma):
        ids = a.alloc(3 * a.page_size)
        buf = torch.full((ids.numel(),), -9, dtype=torch.int64, device=ids.device)
        ptr = buf.data_ptr()
        got = a.translate_kv_loc(ids, out=buf)
        assert got is buf and got.data_ptr() == ptr
        assert torch.equal(buf, a.translate_kv_loc(ids))
        # again after a compaction: the same buffer is rewritten in place
        a.free(a.alloc(a.page_size))
        assert a.translate_kv_loc(ids, out=buf) is buf and buf.data_ptr() == ptr


@pytest.mark.parametrize("kw", POOLS)
def test_ids_are_int64(kw) -> None:
    pool, fa, ma = make_pool(**kw)
    for a in (fa, ma):
        ps = a.page_size
        for out in (a.alloc(ps), a.alloc(0)):
            assert out.dtype == torch.int64 and out.dim() == 1
        for lens_dtype in (torch.int64, torch.int32):
            z = torch.zeros(2, dtype=lens_dtype)
            s = torch.tensor([ps + 1, 2], dtype=lens_dtype)
            ext = a.alloc_extend(z, z, s, s, torch.tensor([-1, -1], dtype=lens_dtype), ps + 3)
            assert ext.dtype == torch.int64 and ext.shape == (ps + 3,)
            d = torch.tensor([1], dtype=lens_dtype)
            dec = a.alloc_decode(d, d, torch.tensor([-1], dtype=lens_dtype))
            assert dec.dtype == torch.int64 and dec.shape == (1,)
        t32 = a.translate_kv_loc(ext.to(torch.int32))
        assert t32.dtype == torch.int64


def test_allocator_attributes() -> None:
    pool, fa, ma = make_pool(page_size=8)
    assert pool.allocator("full") is fa  # one allocator object per sub-pool
    assert (fa.num_pages, fa.min_page_index, fa.page_size) == (
        pool.max_slots("full") // 8,
        pool.min_slot_index("full") // 8,
        8,
    )
    assert (ma.num_pages, ma.min_page_index, ma.page_size) == (
        pool.max_slots("mamba"),
        pool.min_slot_index("mamba"),
        1,
    )
    assert fa.watermark == fa.min_page_index and ma.watermark == ma.num_pages - 1
    assert pool.names == ("full", "mamba")
    assert pool.page_size == 8 and pool.device == torch.device("cpu")
    assert isinstance(pool.stats(), ukv.PoolStats)
    assert ukv._core.TOMBSTONE == -1

"""A catalogue of bad calls (API.md §6): each raises the exact ``ukv.errors`` class, with a
message naming the bad value, and leaves the pool byte-for-byte as it was.

Every case runs on a CPU pool that already holds data and has been through compactions
(eager) or holds holes (lazy); the snapshot compared before and after covers both
sides' v2p/p2v tables, the free-id order, the arena state (watermark, live, holes,
pending, span), the capacity queries, the open free groups, the stats and the raw bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

import ukv
from ukv.errors import (
    ArgumentError,
    DoubleFreeError,
    InvalidIdError,
    PoolConfigError,
)

# --------------------------------------------------------------------------- fixtures


def specs(full_grow: str = "up"):
    """The reference fixtures: full MHA L=2, H=2, D=4 fp16 (64 B), Mamba 160 B."""
    other = "down" if full_grow == "up" else "up"
    full = ukv.MHASpec("full", 2, 2, 4, torch.float16, grow=full_grow)
    mamba = ukv.MambaSpec(
        "mamba", 2, ((4, 3),), torch.float32, (2, 2, 2), torch.float32, grow=other
    )
    return full, mamba


TOTAL = 64 * 64 + 16 * 160


@dataclass
class Ctx:
    """A populated pool and the ids a case needs."""

    pool: ukv.UnifiedKVPool
    ps: int
    live: torch.Tensor  # live full tokens
    freed: torch.Tensor  # full tokens freed earlier
    never: int  # a full token in the id space that was never allocated
    live_mamba: torch.Tensor
    freed_mamba: torch.Tensor

    @property
    def fa(self):
        return self.pool.allocator("full")

    @property
    def ma(self):
        return self.pool.allocator("mamba")


def populate(kind: str) -> Ctx:
    """Pool kinds: ``ps1``/``ps4`` (eager) and ``lazy1``/``lazy4``."""
    ps = 4 if kind.endswith("4") else 1
    lazy = kind.startswith("lazy")
    pool = ukv.UnifiedKVPool(TOTAL, list(specs()), page_size=ps, device="cpu", lazy=lazy)
    fa, ma = pool.allocator("full"), pool.allocator("mamba")
    a, b, c = fa.alloc(6 * ps), fa.alloc(4 * ps), fa.alloc(3 * ps)
    gen = torch.Generator().manual_seed(1234)
    for ids in (a, b, c):  # random K/V bytes at every live token
        loc = fa.translate_kv_loc(ids)
        for layer in range(2):
            k = torch.randn(ids.numel(), 2, 4, generator=gen)
            pool.set_kv("full", layer, loc, k, -k)
    fa.free(b)  # eager: compaction moved c; lazy: holes
    m = ma.alloc(5)
    conv, temporal = pool.state_views("mamba")
    phys = ma.translate_kv_loc(m)
    conv[0][:, phys] = torch.randn(2, 5, 4, 3, generator=gen)
    temporal[:, phys] = torch.randn(2, 5, 2, 2, 2, generator=gen)
    ma.free(m[1:2])
    live = torch.cat([a, c])
    never = int(pool._arena.free_ids(0)[-1]) * ps  # the tail of the free list: never used
    assert not fa.is_slot_allocated(never)
    pool.check_invariants()
    return Ctx(pool, ps, live, b, never, m[[0, 2, 3, 4]], m[1:2])


def snapshot(pool: ukv.UnifiedKVPool) -> dict[str, Any]:
    snap: dict[str, Any] = {"raw": pool.raw.clone(), "stats": pool.stats()}
    snap["latest"] = pool._arena.latest_token()
    for i, name in enumerate(pool.names):
        a = pool.allocator(name)
        snap[name] = (
            a.v2p.clone(),
            a.p2v.clone(),
            pool._arena.free_ids(i).tolist(),
            pool._arena.pool_state(i),
            a.available_size(),
            a.schedulable_available_size(),
            a.allocated_count(),
            pool._arena.in_free_group(i),
        )
    return snap


def assert_unchanged(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert torch.equal(before["raw"], after["raw"]), "pool bytes changed"
    assert before["stats"] == after["stats"]
    assert before["latest"] == after["latest"]
    for name in ("full", "mamba"):
        b, a = before[name], after[name]
        assert torch.equal(b[0], a[0]), f"{name} v2p changed"
        assert torch.equal(b[1], a[1]), f"{name} p2v changed"
        assert b[2:] == a[2:], f"{name} state changed"


# ---------------------------------------------------------------------- the catalogue


def i64(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


@dataclass
class Case:
    """``call(ctx)`` must raise ``exc`` whose message contains every ``needles(ctx)``."""

    name: str
    call: Callable[[Ctx], Any]
    exc: type[Exception]
    needles: Callable[[Ctx], list[str]]
    kinds: tuple[str, ...] = ("ps1", "lazy1")
    setup: Callable[[Ctx], Any] | None = None
    marks: list[Any] = field(default_factory=list)


def t0(ctx: Ctx, ids: torch.Tensor) -> str:
    return f"id {int(ids[0])}"


CASES = [
    # ----- free
    Case(
        "free_double",
        lambda c: c.fa.free(c.freed),
        DoubleFreeError,
        lambda c: [t0(c, c.freed)],
        ("ps1", "ps4", "lazy1", "lazy4"),
    ),
    Case(
        "free_never_allocated",
        lambda c: c.fa.free(i64(c.never)),
        DoubleFreeError,
        lambda c: [f"id {c.never}"],
        ("ps1", "ps4", "lazy1", "lazy4"),
    ),
    Case(
        "free_out_of_range",
        lambda c: c.fa.free(i64(10_000)),
        InvalidIdError,
        lambda c: ["10000"],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "free_negative",
        lambda c: c.fa.free(i64(-3)),
        InvalidIdError,
        lambda c: ["-3"],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "free_reserved_zero",
        lambda c: c.fa.free(i64(0)),
        InvalidIdError,
        lambda c: ["id 0"],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "free_below_min_slot",
        lambda c: c.fa.free(i64(c.pool.min_slot_index("full") - 1)),
        InvalidIdError,
        lambda c: [f"id {c.pool.min_slot_index('full') - 1}"],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "free_duplicate_ids_ps1",
        lambda c: c.fa.free(c.live[[0, 1, 0]]),
        DoubleFreeError,
        lambda c: [t0(c, c.live)],
    ),
    Case(
        "free_live_then_out_of_range",
        lambda c: c.fa.free(torch.cat([c.live[:2], i64(999_999)])),
        InvalidIdError,
        lambda c: ["999999"],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "free_live_then_freed",
        lambda c: c.fa.free(torch.cat([c.live[:2], c.freed[:1]])),
        DoubleFreeError,
        lambda c: [t0(c, c.freed)],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "free_mamba_double",
        lambda c: c.ma.free(c.freed_mamba),
        DoubleFreeError,
        lambda c: [t0(c, c.freed_mamba), "mamba"],
    ),
    Case(
        "free_float_tensor",
        lambda c: c.fa.free(c.live.float()),
        ArgumentError,
        lambda c: ["float32"],
    ),
    Case(
        "free_2d_tensor",
        lambda c: c.fa.free(c.live[:4].view(2, 2)),
        ArgumentError,
        lambda c: ["(2, 2)"],
    ),
    Case(
        "free_non_contiguous", lambda c: c.fa.free(c.live[::2]), ArgumentError, lambda c: ["(2,)"]
    ),
    Case("free_list", lambda c: c.fa.free(c.live.tolist()), ArgumentError, lambda c: ["list"]),
    Case("free_none", lambda c: c.fa.free(None), ArgumentError, lambda c: ["NoneType"]),
    Case(
        "free_numpy_float",
        lambda c: c.fa.free(c.live.numpy().astype(np.float64)),
        ArgumentError,
        lambda c: ["float64"],
    ),
    Case(
        "free_bool_tensor",
        lambda c: c.fa.free(torch.ones(2, dtype=torch.bool)),
        ArgumentError,
        lambda c: ["torch.bool"],
    ),
    # ----- alloc
    Case(
        "alloc_not_page_multiple",
        lambda c: c.fa.alloc(5),
        ArgumentError,
        lambda c: ["5"],
        ("ps4", "lazy4"),
    ),
    Case("alloc_negative", lambda c: c.fa.alloc(-4), ArgumentError, lambda c: ["-4"]),
    Case("alloc_float", lambda c: c.fa.alloc(4.0), ArgumentError, lambda c: ["4.0"]),
    Case("alloc_bool", lambda c: c.fa.alloc(True), ArgumentError, lambda c: ["True"]),
    Case("alloc_str", lambda c: c.fa.alloc("4"), ArgumentError, lambda c: ["'4'"]),
    Case("alloc_none", lambda c: c.fa.alloc(None), ArgumentError, lambda c: ["None"]),
    # ----- alloc_extend
    Case(
        "extend_mismatched_lengths",
        lambda c: c.fa.alloc_extend(i64(0, 0), i64(0, 0), i64(4), i64(4), i64(-1, -1), 4),
        ArgumentError,
        lambda c: ["length 1"],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "extend_prefix_longer_than_seq",
        lambda c: c.fa.alloc_extend(i64(5, 0), i64(5, 0), i64(3, 4), i64(3, 4), i64(-1, -1), 2),
        ArgumentError,
        lambda c: ["prefix 5"],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "extend_negative_prefix",
        lambda c: c.fa.alloc_extend(i64(-1), i64(-1), i64(4), i64(4), i64(-1), 5),
        ArgumentError,
        lambda c: ["prefix -1"],
    ),
    Case(
        "extend_wrong_extend_num_tokens",
        lambda c: c.fa.alloc_extend(i64(0), i64(0), i64(4), i64(4), i64(-1), 7),
        ArgumentError,
        lambda c: ["7"],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "extend_float_lengths",
        lambda c: c.fa.alloc_extend(i64(0), i64(0).float(), i64(4), i64(4).float(), i64(-1), 4),
        ArgumentError,
        lambda c: ["float32"],
    ),
    Case(
        "extend_last_loc_not_live",
        lambda c: c.fa.alloc_extend(i64(2), i64(2), i64(5), i64(5), c.freed[1:2], 3),
        ArgumentError,
        lambda c: [f"last_loc = {int(c.freed[1])}"],
        ("ps4", "lazy4"),
    ),
    Case(
        "extend_last_loc_wrong_page_offset",
        lambda c: c.fa.alloc_extend(i64(2), i64(2), i64(5), i64(5), c.live[2:3], 3),
        ArgumentError,
        lambda c: [f"last_loc = {int(c.live[2])}"],
        ("ps4", "lazy4"),
    ),
    # ----- alloc_decode
    Case(
        "decode_seq_len_zero",
        lambda c: c.fa.alloc_decode(i64(0), i64(0), i64(-1)),
        ArgumentError,
        lambda c: ["= 0"],
        ("ps1", "ps4", "lazy1"),
    ),
    Case(
        "decode_last_loc_not_live",
        lambda c: c.fa.alloc_decode(i64(3), i64(3), c.freed[1:2]),
        ArgumentError,
        lambda c: [f"last_loc = {int(c.freed[1])}"],
        ("ps4", "lazy4"),
    ),
    Case(
        "decode_last_loc_length",
        lambda c: c.fa.alloc_decode(i64(2, 3), i64(2, 3), c.live[:1]),
        ArgumentError,
        lambda c: ["length 1"],
    ),
    # ----- translate
    Case(
        "translate_out_wrong_dtype",
        lambda c: c.fa.translate_kv_loc(c.live, out=torch.empty(c.live.numel(), dtype=torch.int32)),
        ArgumentError,
        lambda c: ["int32"],
    ),
    Case(
        "translate_out_wrong_shape",
        lambda c: c.fa.translate_kv_loc(c.live[:3], out=torch.empty(4, dtype=torch.int64)),
        ArgumentError,
        lambda c: ["(4,)"],
    ),
    Case(
        "translate_out_wrong_device",
        lambda c: c.fa.translate_kv_loc(
            c.live, out=torch.empty(c.live.numel(), dtype=torch.int64, device="meta")
        ),
        ArgumentError,
        lambda c: ["meta"],
    ),
    Case(
        "translate_float_ids",
        lambda c: c.fa.translate_kv_loc(c.live.float()),
        ArgumentError,
        lambda c: ["float32"],
    ),
    Case(
        "translate_2d_ids",
        lambda c: c.fa.translate_kv_loc(c.live[:4].view(4, 1)),
        ArgumentError,
        lambda c: ["(4, 1)"],
    ),
    # ----- free groups
    Case(
        "free_group_end_without_begin",
        lambda c: c.fa.free_group_end(),
        ArgumentError,
        lambda c: ["full"],
    ),
    Case(
        "free_group_begin_nested",
        lambda c: c.fa.free_group_begin(),
        ArgumentError,
        lambda c: ["full"],
        setup=lambda c: c.fa.free_group_begin(),
    ),
    Case(
        "free_group_double_free_at_queue_time",
        lambda c: c.fa.free(c.live[:1]),
        DoubleFreeError,
        lambda c: [t0(c, c.live)],
        ("ps1", "ps4", "lazy1"),
        setup=lambda c: (c.fa.free_group_begin(), c.fa.free(c.live[:1])),
    ),
    # ----- set_kv
    Case(
        "set_kv_bad_layer",
        lambda c: c.pool.set_kv(
            "full", 5, c.fa.translate_kv_loc(c.live[:3]), torch.ones(3, 2, 4), torch.ones(3, 2, 4)
        ),
        ArgumentError,
        lambda c: ["5"],
    ),
    Case(
        "set_kv_negative_layer",
        lambda c: c.pool.set_kv(
            "full", -1, c.fa.translate_kv_loc(c.live[:3]), torch.ones(3, 2, 4), torch.ones(3, 2, 4)
        ),
        ArgumentError,
        lambda c: ["-1"],
    ),
    Case(
        "set_kv_wrong_shape",
        lambda c: c.pool.set_kv(
            "full", 0, c.fa.translate_kv_loc(c.live[:3]), torch.ones(3, 2, 5), torch.ones(3, 2, 4)
        ),
        ArgumentError,
        lambda c: ["(3, 2, 5)"],
    ),
    Case(
        "set_kv_int_k",
        lambda c: c.pool.set_kv(
            "full",
            0,
            c.fa.translate_kv_loc(c.live[:3]),
            torch.ones(3, 2, 4, dtype=torch.int32),
            torch.ones(3, 2, 4),
        ),
        ArgumentError,
        lambda c: ["int32"],
    ),
    Case(
        "set_kv_float_loc",
        lambda c: c.pool.set_kv(
            "full",
            0,
            c.fa.translate_kv_loc(c.live[:3]).float(),
            torch.ones(3, 2, 4),
            torch.ones(3, 2, 4),
        ),
        ArgumentError,
        lambda c: ["float32"],
    ),
    Case(
        "set_kv_on_mamba",
        lambda c: c.pool.set_kv("mamba", 0, i64(1), torch.ones(1, 2, 4), torch.ones(1, 2, 4)),
        ArgumentError,
        lambda c: ["'mamba'"],
    ),
    # ----- views and names
    Case(
        "kv_views_of_mamba",
        lambda c: c.pool.kv_views("mamba"),
        ArgumentError,
        lambda c: ["'mamba'"],
    ),
    Case(
        "state_views_of_full",
        lambda c: c.pool.state_views("full"),
        ArgumentError,
        lambda c: ["'full'"],
    ),
    Case(
        "unknown_sub_pool", lambda c: c.pool.allocator("nope"), ArgumentError, lambda c: ["'nope'"]
    ),
    Case("unknown_sub_pool_spec", lambda c: c.pool.spec("swa"), ArgumentError, lambda c: ["'swa'"]),
    Case(
        "inflight_event_without_query",
        lambda c: c.pool.set_inflight_forward("ev"),
        ArgumentError,
        lambda c: ["'ev'"],
    ),
    Case(
        "inflight_out_cache_loc_float",
        lambda c: c.pool.set_inflight_forward(_Event(), c.live.float()),
        ArgumentError,
        lambda c: ["float32"],
        ("lazy1",),
    ),
    Case(
        "extend_lengths_not_on_cpu",
        lambda c: c.fa.alloc_extend(i64(0), i64(0).to("meta"), i64(4), i64(4), i64(-1), 4),
        ArgumentError,
        lambda c: ["meta"],
    ),
    Case(
        "free_ids_on_meta",
        lambda c: c.fa.free(c.live.to("meta")),
        ArgumentError,
        lambda c: ["meta"],
    ),
]


class _Event:
    def query(self) -> bool:
        return False


def _params():
    for case in CASES:
        for kind in case.kinds:
            yield pytest.param(case, kind, id=f"{case.name}[{kind}]", marks=case.marks)


@pytest.mark.parametrize("case,kind", list(_params()))
def test_bad_call_raises_and_changes_nothing(case: Case, kind: str) -> None:
    ctx = populate(kind)
    if case.setup is not None:
        case.setup(ctx)
    before = snapshot(ctx.pool)
    with pytest.raises(Exception) as info:
        case.call(ctx)
    assert type(info.value) is case.exc, f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    for needle in case.needles(ctx):
        assert needle in message, f"{needle!r} not in {message!r}"
    assert_unchanged(before, snapshot(ctx.pool))
    ctx.pool.check_invariants()


def test_catalogue_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


# ------------------------------------------------------------- construction errors


def _pool(total=TOTAL, pool_specs=None, **kw):
    kw.setdefault("device", "cpu")
    return ukv.UnifiedKVPool(total, list(specs()) if pool_specs is None else pool_specs, **kw)


def _extra(grow: str, name: str = "extra"):
    return ukv.MHASpec(name, 1, 1, 2, torch.float16, grow=grow)


CONSTRUCTION = [
    ("two_up_specs", lambda: _pool(pool_specs=[specs()[0], _extra("up")]), "['up', 'up']"),
    (
        "two_down_specs",
        lambda: _pool(pool_specs=[_extra("down", "a"), specs()[1]]),
        "['down', 'down']",
    ),
    ("duplicate_names", lambda: _pool(pool_specs=[specs()[0], _extra("down", "full")]), "'full'"),
    ("one_spec", lambda: _pool(pool_specs=[specs()[0]]), "MHASpec(name='full'"),
    ("three_specs_no_middle", lambda: _pool(pool_specs=[*specs(), _extra("up")]), "'up', 'up'"),
    (
        "four_specs",
        lambda: _pool(pool_specs=[*specs(), _extra("middle"), _extra("middle", "x")]),
        "name='extra'",
    ),
    (
        "middle_without_both_ends",
        lambda: _pool(pool_specs=[specs()[0], _extra("middle")]),
        "'middle'",
    ),
    (
        "duplicate_names_three",
        lambda: _pool(pool_specs=[*specs(), _extra("middle", "mamba")]),
        "'mamba'",
    ),
    ("non_spec_object", lambda: _pool(pool_specs=[specs()[0], "notaspec"]), "'notaspec'"),
    ("total_bytes_too_small", lambda: _pool(total=300), "300"),
    ("total_bytes_zero", lambda: _pool(total=0), "= 0"),
    ("total_bytes_negative", lambda: _pool(total=-5), "-5"),
    ("total_bytes_float", lambda: _pool(total=10000.0), "10000.0"),
    ("total_bytes_bool", lambda: _pool(total=True), "True"),
    ("page_size_zero", lambda: _pool(page_size=0), "0"),
    ("page_size_negative", lambda: _pool(page_size=-8), "-8"),
    ("page_size_float", lambda: _pool(page_size=1.5), "1.5"),
    ("unknown_device_string", lambda: _pool(device="tpu"), "'tpu'"),
    ("unsupported_device_type", lambda: _pool(device="xla"), "'xla'"),
    ("max_moves_zero", lambda: _pool(lazy=True, max_moves_per_flush=0), "0"),
    pytest.param(
        "cuda_without_cuda",
        lambda: _pool(device="cuda"),
        "'cuda'",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present"),
    ),
]


@pytest.mark.parametrize("name,build,needle", CONSTRUCTION)
def test_bad_construction(name, build, needle) -> None:
    with pytest.raises(Exception) as info:
        build()
    assert type(info.value) is PoolConfigError, f"{type(info.value).__name__}: {info.value}"
    assert needle in str(info.value), str(info.value)


def test_spec_errors_are_pool_config_errors() -> None:
    with pytest.raises(PoolConfigError, match="head_dim"):
        ukv.MHASpec("full", 1, 1, 0, torch.float16, grow="up")
    with pytest.raises(PoolConfigError, match="sideways"):
        ukv.MHASpec("full", 1, 1, 2, torch.float16, grow="sideways")


# --------------------------------------------------------------- not errors at all


@pytest.mark.parametrize("kind", ["ps1", "ps4", "lazy1"])
@pytest.mark.parametrize(
    "empty",
    [
        torch.empty(0, dtype=torch.int64),
        torch.empty(0, dtype=torch.int32),
        np.empty(0, dtype=np.int64),
    ],
    ids=["int64", "int32", "numpy"],
)
def test_empty_free_is_a_no_op(kind, empty) -> None:
    ctx = populate(kind)
    before = snapshot(ctx.pool)
    ctx.fa.free(empty)
    ctx.ma.free(empty)
    assert_unchanged(before, snapshot(ctx.pool))
    ctx.fa.free_group_begin()
    ctx.fa.free(empty)
    ctx.fa.free_group_end()
    assert_unchanged(before, snapshot(ctx.pool))


@pytest.mark.parametrize("kind", ["ps1", "ps4", "lazy1"])
def test_alloc_zero_returns_empty_int64(kind) -> None:
    ctx = populate(kind)
    before = snapshot(ctx.pool)
    for alloc in (ctx.fa, ctx.ma):
        out = alloc.alloc(0)
        assert isinstance(out, torch.Tensor)
        assert out.dtype == torch.int64 and out.shape == (0,)
    assert_unchanged(before, snapshot(ctx.pool))


@pytest.mark.parametrize("kind", ["ps1", "lazy1"])
def test_alloc_that_does_not_fit_returns_none_and_changes_nothing(kind) -> None:
    ctx = populate(kind)
    before = snapshot(ctx.pool)
    assert ctx.fa.alloc(ctx.fa.schedulable_available_size() + ctx.ps) is None
    assert ctx.ma.alloc(ctx.ma.schedulable_available_size() + 1) is None
    assert_unchanged(before, snapshot(ctx.pool))


@pytest.mark.parametrize("kind", ["ps1", "ps4", "lazy1"])
def test_double_free_in_a_free_group_is_caught_at_queue_time(kind) -> None:
    """The second free of the same page raises at once (not at ``free_group_end``), the
    queue keeps the first, and ending the group frees that page exactly once."""
    ctx = populate(kind)
    fa, ps = ctx.fa, ctx.ps
    target = ctx.live[:ps]  # one whole page
    count = fa.allocated_count()
    fa.free_group_begin()
    fa.free(target[:1])
    before = snapshot(ctx.pool)
    with pytest.raises(DoubleFreeError, match=f"id {int(target[-1])}"):
        fa.free(target[-1:])  # another token of the same page is also a double free
    assert_unchanged(before, snapshot(ctx.pool))
    assert fa.is_slot_allocated(int(target[0]))  # queued, not yet freed
    fa.free_group_end()
    assert not fa.is_slot_allocated(int(target[0]))
    assert fa.allocated_count() == count - ps
    assert int(ctx.pool._arena.free_ids(0)[-1]) == int(target[0]) // ps
    ctx.pool.check_invariants()
    with pytest.raises(DoubleFreeError):
        fa.free(target[:1])


def test_alloc_beyond_int64_is_none_or_argument_error() -> None:
    ctx = populate("ps1")
    before = snapshot(ctx.pool)
    try:
        assert ctx.fa.alloc(2**64) is None
    except ArgumentError as e:
        assert str(2**64) in str(e)
    assert_unchanged(before, snapshot(ctx.pool))


@pytest.mark.parametrize("slot", [1.5, "3"])
def test_is_slot_allocated_rejects_non_integers(slot) -> None:
    ctx = populate("ps1")
    with pytest.raises(ArgumentError, match=str(slot)):
        ctx.fa.is_slot_allocated(slot)


def test_is_slot_allocated_out_of_range_is_false() -> None:
    ctx = populate("ps4")
    fa = ctx.fa
    for slot in (-1, -(2**70), fa.num_pages * 4, 2**63 - 1, 2**70):
        assert fa.is_slot_allocated(slot) is False
    assert fa.is_slot_allocated(0) is True


def test_pool_stays_usable_after_errors() -> None:
    """A call that raised leaves a working pool: the next valid calls behave normally."""
    ctx = populate("ps1")
    for case in CASES:
        if "ps1" in case.kinds and case.setup is None and not case.marks:
            with pytest.raises(case.exc):
                case.call(ctx)
    fa = ctx.fa
    n = fa.available_size()
    assert fa.alloc(n) is not None and fa.alloc(1) is None
    fa.free(ctx.live)
    ctx.pool.check_invariants()

"""Bad inputs to every public call added with the hybrid work (composites, ``MambaSlots``,
the request table, the factories, the command line): each gives a typed ukv error whose
message names the bad argument or value, and leaves the pool and the table as they were
(both sides' core state, both tables, the request table's host mirror)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import ukv
from ukv import cli
from ukv.errors import ArgumentError, InvalidIdError, PoolConfigError, UkvError

FULL = ukv.MHASpec("full", 2, 2, 4, torch.float16, grow="up")
SWA = ukv.MHASpec("swa", 2, 2, 4, torch.float16, grow="down")
MAMBA = ukv.MambaSpec("mamba", 2, ((4, 3),), torch.float32, (2, 2, 2), torch.float32, "down")


def _snapshot(hp: Any) -> tuple:
    pool = hp.pool
    sides = tuple(pool._arena.pool_state(i) for i in range(len(pool._tables)))
    tables = tuple(
        (pool._arena.v2p(i).copy(), pool._arena.p2v(i).copy()) for i in range(len(pool._tables))
    )
    req = hp.requests
    mirror = (
        ()
        if req is None
        else (req._host.clone(), req._host_state.clone(), req._lens.copy(), list(req._free))
    )
    return sides, tables, mirror


def _same(a: tuple, b: tuple) -> bool:
    def eq(x: Any, y: Any) -> bool:
        if isinstance(x, torch.Tensor):
            return torch.equal(x, y)
        if isinstance(x, np.ndarray):
            return np.array_equal(x, y)
        if isinstance(x, tuple | list):
            return len(x) == len(y) and all(eq(p, q) for p, q in zip(x, y))
        return bool(x == y)

    return eq(a, b)


def _refused(hp: Any, call: Callable[[], Any], err: type, needle: str) -> None:
    hp.pool.sync_frees()
    before = _snapshot(hp)
    with pytest.raises(err) as info:
        call()
    assert needle in str(info.value), f"{needle!r} not named in: {info.value}"
    hp.pool.sync_frees()
    assert _same(_snapshot(hp), before), "a refused call changed the pool or the table"
    hp.pool.check_invariants()


def _swa_hybrid(device: str) -> Any:
    hp = ukv.build_swa_hybrid(
        FULL, SWA, window=8, total_bytes=1 << 14, max_context_len=32, max_requests=4,
        page_size=2, device=device,
    )  # fmt: skip
    hp = SimpleNamespace(pool=hp.pool, allocator=hp.allocator, requests=hp.requests)
    hp.live = hp.allocator.alloc(6)
    return hp


def _mamba_hybrid(device: str) -> Any:
    hp = ukv.build_mamba_hybrid(
        FULL, MAMBA, total_bytes=1 << 15, max_context_len=32, max_requests=4, page_size=2,
        device=device,
    )  # fmt: skip
    hp = SimpleNamespace(pool=hp.pool, allocator=hp.allocator, requests=hp.requests)
    a = hp.allocator
    hp.live = a.alloc(4, host=True)
    hp.slot = a.mamba_slots.alloc(1, host=True)
    hp.r = hp.requests.alloc_request()
    hp.requests.append_tokens(hp.r, hp.live)
    hp.requests.set_state(hp.r, int(hp.slot[0]))
    return hp


def _dev(hp: Any, t: torch.Tensor) -> torch.Tensor:
    return t.to(hp.pool.device)


SWA_CASES: dict[str, tuple[Callable[[Any], Any], type, str]] = {
    "alloc(-1)": (lambda hp: hp.allocator.alloc(-1), ArgumentError, "-1"),
    "alloc(1.5)": (lambda hp: hp.allocator.alloc(1.5), ArgumentError, "1.5"),
    "free of an id never given": (
        lambda hp: hp.allocator.free(torch.tensor([25])), InvalidIdError, "25"),
    "free twice": (lambda hp: (hp.allocator.free(hp.live[:2]), hp.pool.sync_frees(),
                               hp.allocator.free(hp.live[:2])), InvalidIdError, ""),
    "free_swa of a dead id": (
        lambda hp: hp.allocator.free_swa(torch.tensor([27])), InvalidIdError, "27"),
    "free_swa of float ids": (
        lambda hp: hp.allocator.free_swa(torch.tensor([1.0])), ArgumentError, "ids"),
    "translate to swa, float ids": (
        lambda hp: hp.allocator.translate_loc_from_full_to_swa(_dev(hp, torch.tensor([1.0]))),
        ArgumentError, "ids"),
    "translate to swa, int64 out": (
        lambda hp: hp.allocator.translate_loc_from_full_to_swa(
            _dev(hp, hp.live[:2]), out=_dev(hp, torch.empty(2, dtype=torch.int64))),
        ArgumentError, "out"),
    "alloc_extend, mismatched lengths": (
        lambda hp: hp.allocator.alloc_extend(
            torch.tensor([0]), torch.tensor([0]), torch.tensor([2]), torch.tensor([2, 2]),
            torch.tensor([-1]), 2), ArgumentError, "seq_lens"),
    "alloc_decode, a length below 1": (
        lambda hp: hp.allocator.alloc_decode(
            torch.tensor([0]), torch.tensor([0]), torch.tensor([-1])), ArgumentError, "seq_lens"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SWA_CASES))
def test_swa_composite_refuses(device: str, case: str) -> None:
    call, err, needle = SWA_CASES[case]
    hp = _swa_hybrid(device)
    if case == "free twice":  # the first free is legitimate; snapshot after it
        hp.allocator.free(hp.live[:2])
        hp.pool.sync_frees()
        call = lambda hp: (hp.allocator.free(hp.live[:2]), hp.pool.sync_frees())  # noqa: E731
    _refused(hp, lambda: call(hp), err, needle)


MAMBA_CASES: dict[str, tuple[Callable[[Any], Any], type, str]] = {
    "slots.alloc(0.5)": (lambda hp: hp.allocator.mamba_slots.alloc(0.5), ArgumentError, "0.5"),
    "slots.free of an id never given": (
        lambda hp: hp.allocator.mamba_slots.free(torch.tensor([13])), InvalidIdError, "13"),
    "slots.translate of a list": (
        lambda hp: hp.allocator.mamba_slots.translate([0]), ArgumentError, "ids"),
    "slots.alloc_group_begin(-2)": (
        lambda hp: hp.allocator.mamba_slots.alloc_group_begin(-2), ArgumentError, "-2"),
    "slots.alloc_group_end without a group": (
        lambda hp: hp.allocator.mamba_slots.alloc_group_end(), ArgumentError, "no group"),
    "tokens_to_release_for_states(-1)": (
        lambda hp: hp.allocator.tokens_to_release_for_states(-1), ArgumentError, "-1"),
    "states_to_release_for_tokens(3), not a page multiple": (
        lambda hp: hp.allocator.states_to_release_for_tokens(3), ArgumentError, "3"),
    "table.append_tokens to a dead request": (
        lambda hp: hp.requests.append_tokens(3, hp.live), InvalidIdError, "3"),
    "table.append_tokens of ids not live": (
        lambda hp: hp.requests.append_tokens(hp.r, torch.tensor([40, 41])), InvalidIdError, "40"),
    "table.append_tokens past max_context_len": (
        lambda hp: hp.requests.append_tokens(hp.r, torch.arange(2, 32)), ArgumentError,
        "max_context_len"),
    "table.set_state(r, 'x')": (
        lambda hp: hp.requests.set_state(hp.r, "x"), ArgumentError, "'x'"),
    "table.set_state to a slot not live": (
        lambda hp: hp.requests.set_state(hp.r, 17), InvalidIdError, "17"),
    "table.free_tokens, a span past the row": (
        lambda hp: hp.requests.free_tokens(hp.r, 2, 9), ArgumentError, "9"),
    "table.free_tokens, start 'a'": (
        lambda hp: hp.requests.free_tokens(hp.r, "a"), ArgumentError, "'a'"),
    "table.free_request(True)": (lambda hp: hp.requests.free_request(True), ArgumentError, "True"),
    "table.last_loc of a dead request": (
        lambda hp: hp.requests.last_loc([2]), InvalidIdError, "2"),
    "table.last_loc of a request past the table": (
        lambda hp: hp.requests.last_loc([99]), InvalidIdError, "99"),
    "table.translate_mamba_indices of floats": (
        lambda hp: hp.requests.translate_mamba_indices(torch.tensor([0.0])), ArgumentError,
        "req_indices"),
    "table.translate_mamba_indices past the table (host)": (
        lambda hp: hp.requests.translate_mamba_indices(torch.tensor([9])), InvalidIdError, "9"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MAMBA_CASES))
def test_mamba_composite_and_request_table_refuse(device: str, case: str) -> None:
    call, err, needle = MAMBA_CASES[case]
    hp = _mamba_hybrid(device)
    _refused(hp, lambda: call(hp), err, needle)


@pytest.mark.gpu
def test_device_request_indices_past_the_table_read_as_no_state() -> None:
    """On the device a range check would wait for the GPU: requests outside the table get
    -1 (no state), like padding, instead of an out-of-bounds read (host indices raise)."""
    hp = _mamba_hybrid("cuda")
    got = hp.requests.translate_mamba_indices(_dev(hp, torch.tensor([hp.r, 9, -3])))
    assert got.dtype == torch.int32
    assert int(got[0]) >= 0 and got[1:].tolist() == [-1, -1]


FACTORY_CASES: dict[str, tuple[Callable[[], Any], type, str]] = {
    "negative total_bytes": (
        lambda: ukv.build_mamba_hybrid(FULL, MAMBA, total_bytes=-5, max_context_len=8,
                                       device="meta"), PoolConfigError, "-5"),
    "max_tokens without max_requests": (
        lambda: ukv.build_mamba_hybrid(FULL, MAMBA, max_tokens=64, max_context_len=8,
                                       device="meta"), PoolConfigError, "max_requests"),
    "max_requests = 0": (
        lambda: ukv.build_mamba_hybrid(FULL, MAMBA, max_tokens=64, max_requests=0,
                                       max_context_len=8, device="meta"), PoolConfigError,
        "max_requests"),
    "window = 0": (
        lambda: ukv.build_swa_hybrid(FULL, SWA, window=0, total_bytes=1 << 14,
                                     max_context_len=8, device="meta"), PoolConfigError, "window"),
    "swapped specs": (
        lambda: ukv.build_mamba_hybrid(MAMBA, FULL, total_bytes=1 << 14, max_context_len=8,
                                       device="meta"), PoolConfigError, "MambaSpec"),
    "unknown preset": (
        lambda: ukv.build_mamba_hybrid(model="no-such-model", total_bytes=1 << 30,
                                       max_context_len=8, device="meta"), UkvError,
        "no-such-model"),
    "model and specs": (
        lambda: ukv.build_swa_hybrid(FULL, SWA, model="gpt-oss-120b", total_bytes=1 << 30,
                                     max_context_len=8, device="meta"), PoolConfigError,
        "model="),
}  # fmt: skip


@pytest.mark.parametrize("case", list(FACTORY_CASES))
def test_factories_refuse(case: str) -> None:
    call, err, needle = FACTORY_CASES[case]
    with pytest.raises(err) as info:
        call()
    assert needle in str(info.value), f"{needle!r} not named in: {info.value}"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "--model", "gpt-oss-120b", "--memory", "lots"], "'lots'"),
        (["plan", "--model", "gpt-oss-120b", "--memory=-3GiB"], "'-3GiB'"),
        (["plan", "--model", "no-such-model", "--memory", "40GiB"], "no-such-model"),
        (["simulate", "--model", "gpt-oss-120b", "--memory", "40GiB", "--trace", "nope"], "nope"),
    ],
)
def test_cli_reports_bad_arguments(argv: list[str], needle: str, capsys: Any) -> None:
    """A ukv error on the command line is one line on stderr naming the value, exit 2."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err

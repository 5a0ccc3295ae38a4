"""Reliability of the Python surface: threads, poisoning, cross-process determinism, a
hypothesis fuzz over the public API with valid and invalid arguments, and a short soak.

See docs/RELIABILITY.md for what each test found and how long the long runs were.
Environment knobs (CI uses the defaults):

* ``UKV_THREAD_ITERS``: operations per thread in the 8-thread test (default 40).
* ``UKV_HYPOTHESIS_EXAMPLES``: examples of the API state machine (default 40).
* ``UKV_PY_SOAK_OPS``: operations of the Python soak per configuration (default 20,000).
"""

from __future__ import annotations

import faulthandler
import os
import random
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from standins import StandInEvent as FakeEvent

import ukv
from ukv import _core
from ukv.errors import (
    ArgumentError,
    DoubleFreeError,
    InvalidIdError,
    PoolConfigError,
    PoolPoisonedError,
    UkvError,
)

THREADS = 8
THREAD_ITERS = int(os.environ.get("UKV_THREAD_ITERS", "40"))
HYPOTHESIS_EXAMPLES = int(os.environ.get("UKV_HYPOTHESIS_EXAMPLES", "40"))
PY_SOAK_OPS = int(os.environ.get("UKV_PY_SOAK_OPS", "20000"))
DEADLOCK_TIMEOUT_S = 120.0


def _specs() -> list[ukv.Spec]:
    """Two tiny MHA sub-pools (fp16 and fp32), so set_kv works on both sides."""
    full = ukv.MHASpec("full", layer_num=1, head_num=1, head_dim=4, dtype=torch.float16, grow="up")
    swa = ukv.MHASpec("swa", layer_num=1, head_num=1, head_dim=2, dtype=torch.float32, grow="down")
    return [full, swa]


def _pool(*, lazy: bool, page_size: int, device: str = "cpu", pages: int = 96) -> ukv.UnifiedKVPool:
    # full: 16 B/token, swa: 16 B/token (fp32, D=2, K+V); ~`pages` pages shared.
    total = 16 * page_size * (pages + 2)
    return ukv.UnifiedKVPool(total, _specs(), page_size=page_size, device=device, lazy=lazy)


# ----- threads -------------------------------------------------------------------------------


@pytest.mark.parametrize(("lazy", "page_size"), [(False, 1), (True, 4)])
def test_eight_threads_hammer_one_pool(lazy: bool, page_size: int) -> None:
    """8 threads alloc / write / verify / free / flush on both sub-pools of one pool.

    Each thread writes a marker unique to (thread, allocation) into every token it owns and
    reads it back before freeing, while the other threads' frees and flushes move pages.
    ``pool.lock`` is held only across translate -> set_kv (physical ids are stale after
    another thread's compaction); everything else goes through the pool's internal lock.
    """
    pool = _pool(lazy=lazy, page_size=page_size)
    names = ("full", "swa")
    dims = {n: pool.spec(n).head_dim for n in names}
    errors: list[BaseException] = []
    stats = {"allocs": 0, "refusals": 0, "frees": 0, "flushes": 0, "checks": 0}
    stats_lock = threading.Lock()
    barrier = threading.Barrier(THREADS)

    def bump(key: str) -> None:
        with stats_lock:
            stats[key] += 1

    def verify(name: str, ids: torch.Tensor, marker: float) -> None:
        k_copy, v_copy = pool.get_cpu_copy(name, ids)
        want = torch.full_like(k_copy, marker)
        if not (torch.equal(k_copy, want) and torch.equal(v_copy, torch.full_like(v_copy, marker))):
            raise AssertionError(f"{name}: tokens {ids.tolist()} lost marker {marker}: {k_copy}")

    def worker(t: int) -> None:
        rng = random.Random(1000 + t)
        held: list[tuple[str, torch.Tensor, float]] = []
        try:
            barrier.wait()
            for it in range(THREAD_ITERS):
                name = names[(t + it) % 2]
                alloc = pool.allocator(name)
                r = rng.random()
                if r < 0.5 or not held:
                    ids = alloc.alloc(page_size * rng.randint(1, 3))
                    if ids is None:
                        bump("refusals")
                    else:
                        bump("allocs")
                        marker = float(t * 100 + it % 100)
                        n = ids.numel()
                        with pool.lock:
                            loc = alloc.translate_kv_loc(ids)
                            kv = torch.full((n, 1, dims[name]), marker)
                            pool.set_kv(name, 0, loc, kv, kv)
                        held.append((name, ids, marker))
                elif r < 0.85:
                    hname, ids, marker = held.pop(rng.randrange(len(held)))
                    verify(hname, ids, marker)
                    pool.allocator(hname).free(ids)
                    bump("frees")
                elif r < 0.95:
                    pool.flush(urgent=rng.random() < 0.5)
                    bump("flushes")
                else:
                    pool.check_invariants()
                    alloc.available_size()
                    alloc.allocated_count()
                    pool.stats()
                    bump("checks")
            for hname, ids, marker in held:
                verify(hname, ids, marker)
                pool.allocator(hname).free(ids)
                bump("frees")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=DEADLOCK_TIMEOUT_S)
        alive = [th.name for th in threads if th.is_alive()]
        if alive:
            faulthandler.dump_traceback(all_threads=True)
            pytest.fail(f"deadlock: threads {alive} still running after {DEADLOCK_TIMEOUT_S} s")
    finally:
        sys.setswitchinterval(old_interval)
    if errors:
        raise errors[0]
    pool.flush(urgent=True)
    pool.check_invariants()
    s = pool.stats()
    assert [sp.live_pages for sp in s.sub_pools] == [0, 0], s
    assert [sp.span_pages for sp in s.sub_pools] == [0, 0], s
    assert stats["allocs"] > THREADS and stats["frees"] >= stats["allocs"], stats
    moved = pool.stats().pages_moved
    print(f"threads: {THREADS} x {THREAD_ITERS} iterations, {stats}, pages moved {moved}")


def test_check_invariants_releases_the_gil() -> None:
    """A large invariant check runs without the GIL: another thread makes progress meanwhile,
    and the check still sees a consistent arena (the pool lock keeps writers out)."""
    pages = 1 << 20
    arena = _core.Arena(
        16 * (pages + 2) + 528 * 4,
        [("kv", 16, 1, "up", None), ("st", 528, 1, "down", None)],
        lazy=True,
    )
    ids = arena.alloc(0, pages - 8)
    arena.free(0, np.ascontiguousarray(ids[::2]))  # holes make the check slow
    ticks = 0
    gained = []
    done = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    th = threading.Thread(target=spin)
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.1)  # with the GIL held, the spinner could not run during a check
    try:
        th.start()
        for _ in range(3):
            before = ticks
            arena.check_invariants()
            gained.append(ticks - before)
    finally:
        done.set()
        th.join()
        sys.setswitchinterval(old)
    assert max(gained) > 1000, f"the spinner ran only {gained} times during the checks"


# ----- poisoning ----------------------------------------------------------------------------


def test_panic_is_converted_and_poisons_the_pool() -> None:
    pool = _pool(lazy=True, page_size=4, device="meta")
    alloc = pool.allocator("full")
    ids = alloc.alloc(8)
    assert ids is not None
    assert not pool._arena.is_poisoned()
    with pytest.raises(PoolPoisonedError, match="debug panic requested") as info:
        pool._arena._debug_panic()
    assert isinstance(info.value, UkvError) and isinstance(info.value, RuntimeError)
    assert pool._arena.is_poisoned()
    calls = [
        lambda: alloc.alloc(4),
        lambda: alloc.free(ids),
        lambda: pool.flush(urgent=True),
        lambda: pool.check_invariants(),
        lambda: alloc.free_group_begin(),
        lambda: alloc.clear(),
        lambda: pool._arena._debug_panic(),
    ]
    for call in calls:
        with pytest.raises(PoolPoisonedError, match="unusable"):
            call()


@pytest.mark.parametrize(
    ("total", "entry"),
    [(1 << 56, 16), (1 << 61, 1), ((1 << 64) - 1, 1)],
)
def test_impossible_table_sizes_are_config_errors(total: int, entry: int) -> None:
    """Found by the audit: these aborted the process or raised a PanicException."""
    with pytest.raises(PoolConfigError):
        _core.Arena(total, [("a", entry, 1, "up", None), ("b", entry, 1, "down", None)])


def test_out_of_range_python_ints_are_ukv_errors() -> None:
    """Found by the Python fuzz: ints beyond int64/uint64 raised OverflowError/ValueError."""
    with pytest.raises(PoolConfigError):
        ukv.UnifiedKVPool(1 << 64, _specs(), device="meta")
    with pytest.raises(PoolConfigError):
        ukv.UnifiedKVPool(4096, _specs(), device="meta", max_moves_per_flush=1 << 64)
    with pytest.raises(PoolConfigError, match="page_size"):
        # found by the seeded Rust stream: alloc of one page listed 2**32 ids and aborted
        ukv.UnifiedKVPool(1 << 40, _specs(), page_size=1 << 32, device="meta")
    pool = _pool(lazy=False, page_size=4, device="meta")
    alloc = pool.allocator("full")
    for n in (1 << 63, 1 << 70):
        with pytest.raises(ArgumentError):
            alloc.alloc(n)
    for slot in (1 << 63, 1 << 70, -(1 << 70)):
        assert alloc.is_slot_allocated(slot) is False
    with pytest.raises(ArgumentError):
        alloc.is_slot_allocated("x")  # type: ignore[arg-type]


def test_bad_inflight_loc_is_rejected_up_front() -> None:
    """Found while writing the API fuzz: a strided ``out_cache_loc`` was accepted, then
    every non-urgent flush raised ArgumentError until that forward completed."""
    pool = _pool(lazy=True, page_size=4, device="meta")
    alloc = pool.allocator("full")
    ids = alloc.alloc(8)
    alloc.free(ids[:4])
    with pytest.raises(ArgumentError, match="contiguous"):
        pool.set_inflight_forward(FakeEvent(), torch.arange(8)[::2])
    pool.set_inflight_forward(FakeEvent(), ids[4:].clone())
    assert pool.flush() >= 0
    pool.check_invariants()


# ----- determinism across processes ------------------------------------------------------------

_TRACE = textwrap.dedent(
    """
    import hashlib, random, sys
    import numpy as np, torch, ukv
    from ukv import _core

    h = hashlib.sha256()

    def fold(a):
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        h.update(b"|")

    def plan(arena):
        for i, src, dst in arena.plan_moves():
            fold([i]); fold(src); fold(dst)
        for i in range(arena.num_pools()):
            upd = arena.plan_table_updates(i)
            if upd is not None:
                fold(upd[0]); fold(upd[1])
        fold(arena.plan_pages()); fold(arena.plan_waits()); fold(arena.plan_resets())

    for ps in (1, 16):
        for lazy in (False, True):
            arena = _core.Arena(64 * 16 * 200 + 1040 * 4, [("kv", 64, ps, "up", None),
                                ("st", 1040, 1, "down", None)], lazy=lazy, max_moves_per_flush=8)
            rng = random.Random(7 + ps + lazy)
            live = [[], []]
            token = 0
            for step in range(3000):
                r = rng.random()
                i = 0 if rng.random() < 0.7 else 1
                p = ps if i == 0 else 1
                if r < 0.45:
                    got = arena.alloc(i, p * rng.randint(1, 4))
                    if got is not None:
                        live[i].append(got)
                        fold(got)
                elif r < 0.8 and live[i]:
                    arena.free(i, live[i].pop(rng.randrange(len(live[i]))))
                elif r < 0.9:
                    fold([arena.flush(rng.random() < 0.3)])
                elif r < 0.95 and lazy:
                    token += 1
                    arena.set_latest_token(token)
                    arena.retire_token(token - 1)
                else:
                    try:
                        arena.free(i, np.array([-1], dtype=np.int64))
                    except ukv.UkvError as e:
                        h.update(str(e).encode())
                plan(arena)
            for i in range(2):
                fold(arena.v2p(i)); fold(arena.p2v(i)); fold(arena.free_ids(i))
                fold(list(arena.pool_state(i))); fold(list(arena.pool_stats(i)))

    # The whole stack on a CPU pool: bytes of the buffer after moves, translate results.
    full = ukv.MHASpec("full", 1, 1, 4, torch.float16, grow="up")
    swa = ukv.MHASpec("swa", 1, 1, 2, torch.float32, grow="down")
    pool = ukv.UnifiedKVPool(16 * 4 * 40, [full, swa], page_size=4, device="cpu", lazy=True)
    rng = random.Random(11)
    held = []
    for step in range(24):
        name = ("full", "swa")[step % 2]
        a = pool.allocator(name)
        if rng.random() < 0.6 or not held:
            ids = a.alloc(4 * rng.randint(1, 2))
            if ids is not None:
                d = pool.spec(name).head_dim
                kv = torch.arange(ids.numel() * d, dtype=torch.float32).reshape(-1, 1, d) + step
                pool.set_kv(name, 0, a.translate_kv_loc(ids), kv, kv)
                held.append((name, ids))
        else:
            name, ids = held.pop(rng.randrange(len(held)))
            pool.allocator(name).free(ids)
        if step % 5 == 4:
            pool.flush(urgent=step % 10 == 9)
    for name, ids in held:
        fold(pool.allocator(name).translate_kv_loc(ids).numpy())
    h.update(pool.raw.numpy().tobytes())
    print("UKV_TRACE_HASH", h.hexdigest())
    """
)


def _run_trace(seed: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    return subprocess.Popen(
        [sys.executable, "-c", _TRACE],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_same_trace_same_plans_and_bytes_across_processes() -> None:
    """Two processes (different hash seeds) run one trace on the core (eager/lazy x page
    size 1/16, 3,000 steps each) and on a CPU pool; every plan, the final tables, translate
    results and the buffer's bytes hash the same."""
    procs = [_run_trace(seed) for seed in ("1", "2")]
    digests = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        line = [ln for ln in out.splitlines() if ln.startswith("UKV_TRACE_HASH ")]
        assert line, out
        digests.append(line[0].split()[1])
    assert digests[0] == digests[1], digests


# ----- hypothesis: the public API with valid and invalid arguments ------------------------------

_BIG = [-(1 << 70), -(1 << 63), -1, 0, 1, (1 << 31), (1 << 62), (1 << 63) - 1, 1 << 63, 1 << 70]
_ID_DTYPES = [torch.int64, torch.int32, torch.int16, torch.uint8, torch.float32, torch.bool]
_counts = {"calls": 0, "rejected": 0}


def _id_values(live: list[int]) -> st.SearchStrategy[list[int]]:
    some_live = st.lists(st.sampled_from(live), max_size=6) if live else st.just([])
    weird = st.lists(
        st.one_of(
            st.integers(-5, 600), st.sampled_from([v for v in _BIG if -(1 << 63) <= v < (1 << 63)])
        ),
        max_size=6,
    )
    return st.one_of(some_live, weird, st.tuples(some_live, weird).map(lambda t: t[0] + t[1]))


@st.composite
def _id_container(draw: st.DrawFn, live: list[int]) -> object:
    """Ids as the API expects them (1-D int32/int64 tensor or array) or in a wrong form."""
    vals = draw(_id_values(live))
    form = draw(
        st.sampled_from(
            [
                "t64",
                "t64",
                "t32",
                "np64",
                "np32",
                "dtype",
                "2d",
                "strided",
                "list",
                "none",
                "scalar",
            ]
        )
    )
    if form == "t64":
        return torch.tensor(vals, dtype=torch.int64)
    if form == "t32":
        return torch.tensor([v for v in vals if -(1 << 31) <= v < (1 << 31)], dtype=torch.int32)
    if form == "np64":
        return np.array(vals, dtype=np.int64)
    if form == "np32":
        return np.array([v for v in vals if -(1 << 31) <= v < (1 << 31)], dtype=np.int32)
    if form == "dtype":
        dt = draw(st.sampled_from(_ID_DTYPES[2:]))
        return torch.tensor([abs(v) % 2 for v in vals], dtype=dt)
    if form == "2d":
        return torch.tensor(vals, dtype=torch.int64).reshape(-1, 1)
    if form == "strided":
        return torch.tensor(vals + vals, dtype=torch.int64)[::2]
    if form == "list":
        return vals
    if form == "scalar":
        return torch.tensor(vals[0] if vals else 3)
    return None


class PoolApiMachine(RuleBasedStateMachine):
    """Random public-API calls; every exception must be a non-poisoning ``UkvError`` and
    leave the pool exactly as it was; invariants and a live-token model hold after every
    step."""

    @initialize(page_size=st.sampled_from([1, 4]), lazy=st.booleans())
    def make_pool(self, page_size: int, lazy: bool) -> None:
        self.page_size = page_size
        self.pool = _pool(lazy=lazy, page_size=page_size, device="meta", pages=48)
        self.live: dict[str, set[int]] = {"full": set(), "swa": set()}
        self.group: dict[str, bool] = {"full": False, "swa": False}

    # -- helpers --
    def _snapshot(self) -> tuple:
        tables = tuple(
            (self.pool.allocator(n).v2p.clone(), self.pool.allocator(n).p2v.clone())
            for n in ("full", "swa")
        )
        return tables, self.pool.stats(), tuple(self.pool._arena.in_free_group(i) for i in range(2))

    def _call(self, fn, *args, **kwargs):
        """Call ``fn``; on an error, check that it is a UkvError and changed nothing."""
        before = self._snapshot()
        _counts["calls"] += 1
        try:
            return True, fn(*args, **kwargs)
        except UkvError as e:
            assert not isinstance(e, PoolPoisonedError), e
            _counts["rejected"] += 1
            after = self._snapshot()
            for (v0, p0), (v1, p1) in zip(before[0], after[0]):
                assert torch.equal(v0, v1) and torch.equal(p0, p1), (
                    f"{fn.__name__} raised {e!r} but changed a table"
                )
            assert before[1:] == after[1:], f"{fn.__name__} raised {e!r} but changed the pool"
            return False, e

    def _tokens_of(self, name: str, ids: torch.Tensor) -> set[int]:
        return {int(t) for t in ids.tolist()}

    def _pages(self, name: str, tokens: set[int]) -> set[int]:
        return {t // self.page_size for t in tokens}

    # -- rules --
    @rule(
        name=st.sampled_from(["full", "swa", "nope", ""]),
        n=st.one_of(
            st.integers(-3, 70),
            st.sampled_from(_BIG),
            st.floats(),
            st.booleans(),
            st.none(),
            st.text(max_size=2),
        ),
    )
    def alloc(self, name: str, n: object) -> None:
        if name not in self.live:
            with pytest.raises(ArgumentError):
                self.pool.allocator(name)
            return
        ok, ids = self._call(self.pool.allocator(name).alloc, n)
        valid = (
            isinstance(n, int)
            and not isinstance(n, bool)
            and 0 <= n < (1 << 63)
            and n % self.page_size == 0
        )
        assert ok == valid, (n, ids)
        if ok and ids is not None:
            assert ids.numel() == n and ids.dtype == torch.int64
            new = self._tokens_of(name, ids)
            assert not new & self.live[name], "alloc handed out a live token"
            self.live[name] |= new

    @rule(name=st.sampled_from(["full", "swa"]), data=st.data())
    def free(self, name: str, data: st.DataObject) -> None:
        ids = data.draw(_id_container(sorted(self.live[name])))
        ok, err = self._call(self.pool.allocator(name).free, ids)
        if ok and ids is not None and not isinstance(ids, list):
            toks = {int(t) for t in np.asarray(ids).reshape(-1).tolist()} if len(ids) else set()
            if toks and not self.group[name]:
                pages = self._pages(name, toks)
                self.live[name] = {t for t in self.live[name] if t // self.page_size not in pages}
        elif (
            not ok
            and isinstance(ids, torch.Tensor)
            and ids.dtype == torch.int64
            and ids.dim() == 1
            and ids.is_contiguous()
        ):
            toks = ids.tolist()
            lp = self._pages(name, self.live[name])
            must_fail = any(t < 0 or t // self.page_size not in lp for t in toks) or (
                self.page_size == 1 and len(set(toks)) != len(toks)
            )
            assert must_fail or self.group[name], f"free of live ids {toks} was rejected: {err!r}"

    @rule(name=st.sampled_from(["full", "swa"]))
    def group_begin(self, name: str) -> None:
        ok, _ = self._call(self.pool.allocator(name).free_group_begin)
        assert ok != self.group[name]
        self.group[name] = True

    @rule(name=st.sampled_from(["full", "swa"]))
    def group_end(self, name: str) -> None:
        ok, _ = self._call(self.pool.allocator(name).free_group_end)
        assert ok == self.group[name]
        self.group[name] = False
        # Every queued page is gone now: rebuild the model from the tables.
        alloc = self.pool.allocator(name)
        self.live[name] = {t for t in self.live[name] if alloc.is_slot_allocated(t)}

    @rule(urgent=st.one_of(st.booleans(), st.integers(), st.none()))
    def flush(self, urgent: object) -> None:
        ok, moves = self._call(self.pool.flush, urgent)
        assert ok and moves >= 0

    @rule(
        name=st.sampled_from(["full", "swa"]),
        data=st.data(),
        host_last=st.booleans(),
        bad=st.sampled_from([None, "len", "neg", "order", "count", "last"]),
    )
    def alloc_extend(
        self, name: str, data: st.DataObject, host_last: bool, bad: str | None
    ) -> None:
        b = data.draw(st.integers(1, 3))
        seq = data.draw(st.lists(st.integers(0, 3 * self.page_size + 2), min_size=b, max_size=b))
        pre = [0] * b
        last = [-1] * b
        if bad == "len":
            seq = seq + [1]
        elif bad == "neg":
            pre[0] = -1
        elif bad == "order":
            pre[0], seq[0] = 5, 2
        elif bad == "last":
            last = last[:-1] + [data.draw(st.sampled_from(_BIG[1:8]))]
        want = sum(seq) - sum(pre[: len(seq)]) if bad != "count" else sum(seq) + 1
        ok, ids = self._call(
            self.pool.allocator(name).alloc_extend,
            None,
            torch.tensor(pre, dtype=torch.int64),
            None,
            torch.tensor(seq, dtype=torch.int64),
            torch.tensor(last, dtype=torch.int64),
            want,
        )
        if bad in ("len", "neg", "order", "count"):
            assert not ok
        if ok and ids is not None:
            assert ids.numel() == want
            new = self._tokens_of(name, ids)
            assert len(new) == want and not new & self.live[name]
            self.live[name] |= new

    @rule(name=st.sampled_from(["full", "swa"]), data=st.data())
    def alloc_decode(self, name: str, data: st.DataObject) -> None:
        b = data.draw(st.integers(1, 3))
        seq = data.draw(
            st.lists(st.sampled_from([1, 1, 0, -1, 2, 1 << 62]), min_size=b, max_size=b)
        )
        last = data.draw(
            st.lists(st.sampled_from([-1, 0, 1, 5, 1 << 40]), min_size=b, max_size=b + 1)
        )
        ok, ids = self._call(
            self.pool.allocator(name).alloc_decode,
            None,
            torch.tensor(seq, dtype=torch.int64),
            torch.tensor(last, dtype=torch.int64),
        )
        if ok and ids is not None:
            # Tokens continuing a page are the caller's business (last_loc); count only.
            assert ids.numel() == b, (seq, last, ids)
            self.live[name] |= self._tokens_of(name, ids)

    @rule(name=st.sampled_from(["full", "swa"]), data=st.data(), with_out=st.booleans())
    def translate(self, name: str, data: st.DataObject, with_out: bool) -> None:
        ids = data.draw(_id_container(sorted(self.live[name])))
        alloc = self.pool.allocator(name)
        out = None
        if with_out and isinstance(ids, torch.Tensor):
            out = data.draw(
                st.sampled_from(
                    [
                        torch.empty_like(ids, dtype=torch.int64),
                        torch.empty(1, dtype=torch.int64),
                        ids,
                    ]
                )
            )
        ok, phys = self._call(alloc.translate_kv_loc, ids, out=out)
        if ok:
            assert phys.dtype == torch.int64 and bool((phys >= 0).all())
            if out is not None:
                assert phys is out

    @rule(
        name=st.sampled_from(["full", "swa"]),
        slot=st.one_of(st.integers(-5, 600), st.sampled_from(_BIG), st.text(max_size=1)),
    )
    def is_slot_allocated(self, name: str, slot: object) -> None:
        ok, live = self._call(self.pool.allocator(name).is_slot_allocated, slot)
        if isinstance(slot, int) and ok:
            page = slot // self.page_size if slot >= 0 else -1
            expect = page == 0 or page in self._pages(name, self.live[name])
            assert live == expect, (slot, live)
        elif not isinstance(slot, int):
            assert not ok

    @rule(name=st.sampled_from(["full", "swa"]))
    def clear(self, name: str) -> None:
        ok, _ = self._call(self.pool.allocator(name).clear)
        assert ok
        self.live[name] = set()
        self.group[name] = False

    @rule(
        event=st.sampled_from([FakeEvent(True), FakeEvent(False), object(), None]),
        name=st.sampled_from(["full", "swa"]),
        data=st.data(),
    )
    def forward(self, event: object, name: str, data: st.DataObject) -> None:
        loc = data.draw(st.one_of(st.none(), _id_container(sorted(self.live[name]))))
        ok, _ = self._call(self.pool.set_inflight_forward, event, loc)
        valid_loc = loc is None or (
            isinstance(loc, torch.Tensor)
            and loc.dtype in (torch.int32, torch.int64)
            and loc.dim() == 1
            and loc.is_contiguous()
        )
        assert ok == (hasattr(event, "query") and valid_loc), (event, loc)
        self._call(self.pool.retire_completed)

    @rule(
        layer=st.sampled_from([0, 1, -1, True, 1.0]), n=st.integers(0, 3), bad_shape=st.booleans()
    )
    def set_kv(self, layer: object, n: int, bad_shape: bool) -> None:
        d = 3 if bad_shape else 4
        ok, _ = self._call(
            self.pool.set_kv,
            "full",
            layer,
            torch.zeros(n, dtype=torch.int64),
            torch.zeros(n, 1, d),
            torch.zeros(n, 1, 4),
        )
        assert not ok  # a meta pool holds no bytes; every variant is rejected

    # -- invariants --
    @invariant()
    def consistent(self) -> None:
        self.pool.check_invariants()
        for name in ("full", "swa"):
            alloc = self.pool.allocator(name)
            pages = self._pages(name, self.live[name])
            assert alloc.allocated_count() == len(pages) * self.page_size, (name, pages)
            for t in list(self.live[name])[:16]:
                assert alloc.is_slot_allocated(t)


def test_public_api_fuzz() -> None:
    _counts.update(calls=0, rejected=0)
    run_state_machine_as_test(
        PoolApiMachine,
        settings=settings(
            max_examples=HYPOTHESIS_EXAMPLES,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
    print(
        f"api fuzz: {HYPOTHESIS_EXAMPLES} examples, {_counts['calls']} calls, "
        f"{_counts['rejected']} rejected with a UkvError"
    )


# ----- short soak through the Python API ----------------------------------------------------------


def _rss_kib() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4
    except OSError:
        return 0


@pytest.mark.parametrize(("lazy", "page_size"), [(False, 1), (True, 1), (False, 16), (True, 16)])
def test_python_soak_stays_flat_and_drains(lazy: bool, page_size: int) -> None:
    """Bookkeeping-only (meta) pool: a mixed workload of ``UKV_PY_SOAK_OPS`` calls; holes and
    pending pages stay bounded by the pool size, RSS stays flat, and it drains to empty."""
    pool = _pool(lazy=lazy, page_size=page_size, device="meta", pages=512)
    rng = random.Random(99)
    names = ("full", "swa")
    held: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    num_pages = {n: pool.allocator(n).num_pages for n in names}
    ops = 0
    invalid = 0
    rss_warm = 0
    token_events: list[FakeEvent] = []
    while ops < PY_SOAK_OPS:
        name = names[rng.random() < 0.4]
        alloc = pool.allocator(name)
        r = rng.random()
        if r < 0.45:
            ids = alloc.alloc(page_size * rng.randint(1, 6))
            if ids is not None:
                held[name].append(ids)
        elif r < 0.85 and held[name]:
            alloc.free(held[name].pop(rng.randrange(len(held[name]))))
        elif r < 0.92:
            pool.flush(urgent=rng.random() < 0.2)
        elif r < 0.96 and lazy:
            ev = FakeEvent()
            token_events.append(ev)
            pool.set_inflight_forward(ev, held[name][-1] if held[name] else None)
            if len(token_events) > 1:
                token_events.pop(0).done = True
        else:
            with pytest.raises((InvalidIdError, DoubleFreeError)):
                alloc.free(torch.tensor([-1 - rng.randrange(5)]))
            invalid += 1
        ops += 1
        if ops % 1000 == 0:
            pool.check_invariants()
            for sp in pool.stats().sub_pools:
                assert sp.holes <= num_pages[sp.name] and sp.pending_pages <= num_pages[sp.name]
                assert sp.live_pages + sp.holes + sp.pending_pages == sp.span_pages
            if ops == PY_SOAK_OPS // 5:
                rss_warm = _rss_kib()
    for name in names:
        for ids in held[name]:
            pool.allocator(name).free(ids)
    for ev in token_events:
        ev.done = True
    pool.retire_completed()
    pool.flush(urgent=True)
    pool.check_invariants()
    s = pool.stats()
    assert [(sp.live_pages, sp.holes, sp.pending_pages, sp.span_pages) for sp in s.sub_pools] == [
        (0, 0, 0, 0)
    ] * 2
    assert (
        len(pool._runtime.forwards.events) == 0 and len(pool._runtime.forwards.write_locs) == 0
    ), "event bookkeeping grew"
    if rss_warm and PY_SOAK_OPS >= 100_000:
        assert _rss_kib() - rss_warm < 32 * 1024, "RSS grew during the soak"
    assert invalid > 0
    print(
        f"python soak lazy={lazy} ps={page_size}: {ops} ops, {invalid} invalid, rss {_rss_kib()} KiB"
    )

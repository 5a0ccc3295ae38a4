"""Defects found in the second review, each pinned by a test that failed before its fix
(docs/RELIABILITY.md, "Second round")."""

from __future__ import annotations

import pytest
import torch

import ukv


def _pool(device: str, lazy: bool = False) -> ukv.UnifiedKVPool:
    specs = [
        ukv.MHASpec("full", 2, 2, 4, torch.float16, grow="up"),
        ukv.MambaSpec("mamba", 2, ((4, 3),), torch.float32, (2, 2, 2), torch.float32, "down"),
    ]
    return ukv.UnifiedKVPool(1 << 16, specs, page_size=2, device=device, lazy=lazy)


class Done:
    def query(self) -> bool:
        return True


def test_eager_pool_keeps_no_completed_forwards(device: str) -> None:
    pool = _pool(device)
    loc = pool.allocator("full").alloc(2)
    for _ in range(20_000):
        pool.set_inflight_forward(Done(), loc)
    assert len(pool._runtime.forwards.events) <= 1 and len(pool._runtime.forwards.write_locs) <= 1


def test_get_cpu_copy_checks_every_id_and_raises_invalid_id(device: str) -> None:
    pool = _pool(device)
    fa = pool.allocator("full")
    ids = fa.alloc(8)
    dead = fa.alloc(2)
    fa.free(dead)
    pool.sync_frees()
    copy = pool.get_cpu_copy("full", ids)
    assert len(copy) == 4 and copy[0].shape == (8, 2, 4)
    with pytest.raises(ukv.InvalidIdError, match=str(int(dead[0]))):
        pool.get_cpu_copy("full", torch.cat([ids, dead]))
    with pytest.raises(ukv.InvalidIdError):
        pool.get_cpu_copy("full", torch.tensor([1 << 40]))
    with pytest.raises(ukv.InvalidIdError):
        pool.load_cpu_copy("full", copy, torch.cat([ids[:6], dead]))


def test_load_cpu_copy_is_atomic(device: str) -> None:
    pool = _pool(device)
    fa = pool.allocator("full")
    ids = fa.alloc(4)
    copy = pool.get_cpu_copy("full", ids)
    copy = [c + 1 for c in copy]
    copy[-1] = copy[-1][:3]  # the last tensor is short
    before = pool.raw.clone()
    with pytest.raises(ukv.ArgumentError, match=r"copy\[3\]"):
        pool.load_cpu_copy("full", copy, ids)
    assert torch.equal(pool.raw, before), "a rejected load wrote some tensors"


def test_state_copy_round_trips(device: str) -> None:
    pool = _pool(device)
    ma = pool.allocator("mamba")
    slots = ma.alloc(3)
    conv, temporal = pool.state_views("mamba")
    temporal[:, ma.translate_kv_loc(slots.to(ma.v2p.device))] = 5.0
    copy = pool.get_cpu_copy("mamba", slots, non_blocking=True).wait()
    assert all(c.shape[0] == 3 for c in copy) and (copy[-1] == 5.0).all()
    pool.load_cpu_copy("mamba", [c * 0 for c in copy], slots)
    assert (temporal[:, ma.translate_kv_loc(slots.to(ma.v2p.device))] == 0).all()


WRITES = {
    "item assignment": lambda t: t.__setitem__(1, 5),
    "slice assignment": lambda t: t[1:3].__setitem__(slice(None), 5),
    "fill_": lambda t: t.fill_(0),
    "copy_": lambda t: t.copy_(t.clone()),
    "+=": lambda t: t.__iadd__(1),
    "index_put_": lambda t: t.index_put_((torch.tensor([1], device=t.device),), t[:1].clone()),
    "out=": lambda t: torch.add(t.clone(), 1, out=t),
    "view then zero_": lambda t: t.view(torch.int32).zero_(),
}


@pytest.mark.parametrize("what", list(WRITES))
@pytest.mark.parametrize("table", ["v2p", "p2v"])
def test_tables_handed_out_are_read_only(device: str, table: str, what: str) -> None:
    """On a CPU pool v2p/p2v are the core's own memory (a write corrupted the core); on
    CUDA they are what every kernel translates through. Every write path raises, names the
    table, and leaves it and the pool as they were."""
    pool = _pool(device)
    alloc = pool.allocator("full")
    ids = alloc.alloc(6)
    assert ids is not None
    t = getattr(alloc, table)
    before = t.clone()
    with pytest.raises(ukv.ArgumentError, match=f"{table} of sub-pool 'full' is read-only"):
        WRITES[what](t)
    assert torch.equal(getattr(alloc, table), before)
    pool.check_invariants()
    alloc.free(ids)
    pool.sync_frees()
    pool.check_invariants()


def test_read_only_tables_still_read_like_tensors(device: str) -> None:
    pool = _pool(device)
    alloc = pool.allocator("full")
    ids = alloc.alloc(4)
    assert ids is not None
    v2p = alloc.v2p
    pages = v2p[ids.to(v2p.device) // 2]  # a gather makes new memory: a plain tensor
    pages[0] = -7  # writable, and the table is untouched
    assert type(pages) is torch.Tensor and int(v2p[int(ids[0]) // 2]) != -7
    assert torch.equal(
        alloc.translate_kv_loc(ids.to(v2p.device)) // 2, v2p[ids.to(v2p.device) // 2]
    )
    assert v2p.clone().add_(1).dtype == torch.int64  # a copy is the caller's to change
    arr = alloc.p2v.cpu().numpy()
    if device == "cpu":
        with pytest.raises(ValueError):
            arr[0] = 1  # numpy() of the core's memory is not writable


# ----- fault injection in plan execution --------------------------------------------------

FAULT_POINTS = {
    # where in PackedExecutor.run a failure is injected: (object path, method)
    "staging window": ("ring", "window"),
    "staging commit": ("ring", "commit"),
    "kernel launch": ("kernel", "launch"),
    "prologue (waits, table re-uploads)": (None, "prologue"),
}


def _fault_ops() -> dict:
    def alloc(pool, live):
        return pool.allocator("full").alloc(4)

    def relocating_free(pool, live):
        pool.allocator("full").free(live[:2])

    def urgent_flush(pool, live):
        pool.allocator("full").free(live[:2])
        pool.flush(urgent=True)

    def clear(pool, live):
        pool.allocator("full").clear()

    def state_alloc(pool, live):
        return pool.allocator("mamba").alloc(2)

    return {
        "alloc": alloc,
        "relocating free": relocating_free,
        "urgent flush": urgent_flush,
        "clear": clear,
        "state alloc": state_alloc,
    }


def _poisoned_everywhere(pool: ukv.UnifiedKVPool, live: torch.Tensor) -> None:
    fa = pool.allocator("full")
    for later in (
        lambda: fa.alloc(1),
        lambda: fa.free(live[2:3]),
        lambda: pool.flush(),
        lambda: fa.translate_kv_loc(live),
        lambda: pool.allocator("mamba").alloc(1),
        lambda: pool.stats(),
    ):
        with pytest.raises(ukv.PoolPoisonedError):
            later()


@pytest.mark.parametrize("lazy", [False, True])
def test_a_fault_at_any_point_of_plan_execution_poisons_or_changes_nothing(
    device: str, lazy: bool
) -> None:
    """Inject a raising call at each point of plan execution under each kind of operation:
    either the point is not reached and the operation completes (invariants hold), or the
    operation raises ``PoolPoisonedError`` and so does every later call, or (staging a free
    of device ids, before anything is queued) it raises the fault with the pool exactly as
    it was and still usable — never a silently inconsistent pool. Every point must be
    reached by some operation."""
    reached: dict[str, int] = dict.fromkeys(FAULT_POINTS, 0)
    unchanged: dict[str, int] = dict.fromkeys(FAULT_POINTS, 0)
    for point, (owner, method) in FAULT_POINTS.items():
        for op_name, op in _fault_ops().items():
            pool = _pool(device, lazy=lazy)
            if not isinstance(pool._exec, ukv.execution.PackedExecutor):
                pytest.skip("the packed executor runs on CUDA and under Triton's interpreter")
            fa = pool.allocator("full")
            live = fa.alloc(8)
            assert live is not None
            target = pool._exec if owner is None else getattr(pool._exec, owner)
            calls = []

            def boom(*_a, _m=method, _calls=calls, **_k):
                _calls.append(_m)
                raise RuntimeError(f"injected fault in {_m}")

            before = [pool._arena.pool_state(i) for i in range(2)]
            setattr(target, method, boom)
            try:
                op(pool, live)
            except ukv.PoolPoisonedError as exc:
                assert calls, f"{op_name}: poisoned without reaching {point}"
                assert "injected fault" in str(exc)
                _poisoned_everywhere(pool, live)
                reached[point] += 1
                continue
            except RuntimeError as exc:
                # Staging a free of device ids (CUDA) fails before the free is queued: the
                # caller gets the error and the pool is exactly as it was, still usable.
                assert calls and "injected fault" in str(exc), exc
                assert [pool._arena.pool_state(i) for i in range(2)] == before
                delattr(target, method)
                pool.check_invariants()
                pool.allocator("full").free(live[:2])
                pool.sync_frees()
                pool.check_invariants()
                unchanged[point] += 1
                continue
            assert not calls, f"{op_name}: {point} raised but the pool was not poisoned"
            delattr(target, method)
            pool.check_invariants()
    print(f"lazy={lazy} poisoned: {reached}, refused with the pool unchanged: {unchanged}")
    missing = [p for p, n in reached.items() if not n]
    assert not missing, f"fault points no operation reached: {missing}"


# ----- the soak script, small ---------------------------------------------------------------


@pytest.mark.parametrize("lazy", [False, True])
def test_soak_script_keeps_every_byte_on_a_short_run(device: str, lazy: bool, tmp_path) -> None:
    """``benches/soak_cuda.py`` (run at 10^6 operations per mode on the GPU machine) on a
    short run through the test device's executor: every check finds every token's K rows
    and every state intact, the pool drains, and the progress file has each check."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benches" / "soak_cuda.py"
    spec = importlib.util.spec_from_file_location("soak_cuda", path)
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    progress = tmp_path / "progress.jsonl"
    res = soak.run(device, 600, lazy, 4, 200, seed=3, progress=progress)
    assert res["drained"] and res["checks"] == 3
    assert res["counts"]["alloc"] > 50 and res["counts"]["copy"] > 5
    assert res["pages_moved"] > 0
    assert len(progress.read_text().splitlines()) == 3

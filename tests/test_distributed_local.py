"""Tensor-parallel pieces that need no second process (issue 23).

The heart of leader mode is that a follower, with no core, ends every plan with the same
bytes and tables as the leader. Here one pool plays the leader: each plan it executes is
recorded (:class:`ukv.distributed.tap.PlanTap`), shipped through the step message format
and replayed (:class:`ukv.distributed.replay.Replayer`) onto a second buffer with the
same specs; after every operation the mirror's bytes and tables must equal the pool's.
Also: the ``tp_size`` / ``tp_rank`` plumbing of presets and factories, the divergence
message, and refusals of bad setups.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import ukv
from ukv import layout, ops
from ukv.distributed.digest import digest_words
from ukv.distributed.divergence import DivergenceError, StepFacts, _explain, check_plans
from ukv.distributed.geometry import Geometry, pool_words, spec_mismatch
from ukv.distributed.group import Group
from ukv.distributed.replay import Replayer
from ukv.distributed.tap import PlanTap
from ukv.distributed.wire import read_records
from ukv.models import preset


def _specs(middle: bool) -> list[ukv.Spec]:
    full = ukv.MHASpec("full", 2, 2, 4, torch.float16, grow="up")
    mamba = ukv.MambaSpec(
        "mamba", 1, ((2, 6),), torch.float32, (2, 2, 2), torch.float32, grow="down"
    )
    specs: list[ukv.Spec] = [full, mamba]
    if middle:
        specs.append(ukv.MHASpec("mid", 1, 1, 8, torch.float32, grow="middle"))
    return specs


class _Mirror:
    """A follower's state built from the leader pool's geometry words, and its replayer."""

    def __init__(self, pool: ukv.UnifiedKVPool, tap: PlanTap) -> None:
        self.pool, self.tap = pool, tap
        self.geo = Geometry.read(pool_words(pool))
        self.raw = pool.raw.clone()
        self.tables = [torch.from_numpy(t).to(pool.device) for t in tap.host_tables()]
        self.lens = [self.geo.table_len(i) for i in range(len(self.tables))]
        self.replay = Replayer(
            self.raw, self.tables, [p[2] for p in self.geo.pools], self.geo.move_order
        )
        self.steps = 0

    def apply_step(self) -> list[np.ndarray]:
        """Ship the tap's records through the message format and replay them."""
        msg = self.tap.log.message(self.steps).copy()
        ids = []
        dev = torch.from_numpy(msg).to(self.raw.device)
        base = msg.__array_interface__["data"][0]
        for rec in read_records(msg, self.lens):
            at = (rec.payload.__array_interface__["data"][0] - base) // 8
            self.replay.apply(rec, dev[at : at + len(rec.payload)])
            ids.append(rec.ids.copy())
        self.tap.new_step()
        self.steps += 1
        return ids

    def views(self, name: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(v2p, the sub-pool's byte views) on the mirror."""
        i = self.pool.names.index(name)
        spec, words = self.pool.spec(name), self.geo.pools[i]
        v2p = self.tables[i][: words[6]]
        # As FollowerPool builds them: (k, v) per MHA layer, (conv, temporal) for a state.
        first, second = layout.views_for(self.raw, spec, words[1], words[3])
        return v2p, [*first, *second] if isinstance(spec, ukv.MHASpec) else [*first, second]

    def check(self) -> None:
        assert torch.equal(self.raw, self.pool.raw), "the replayed bytes differ from the pool's"
        for i, t in enumerate(self.tap.host_tables()):
            assert np.array_equal(self.tables[i].cpu().numpy(), t), f"tables of sub-pool {i}"


def _write(views: list[torch.Tensor], phys: torch.Tensor, ps: int, value: float) -> None:
    """The engine's write of new rows (the same on the leader and the mirror)."""
    for view in views:
        if ps > 1 or view.dim() == 4 and view.shape[1] == ps:  # [pages, page_size, H, D]
            view[phys // ps, phys % ps] = value
        else:  # state: [layer, slot, ...]
            view[:, phys] = value


def _random_ops(mirror: _Mirror, rng: random.Random, n: int) -> None:
    """Allocations (with writes), frees, flushes and clears on every sub-pool; after each
    operation the mirror replays its plans and repeats the write at its own ids."""
    pool = mirror.pool
    live: dict[str, list[torch.Tensor]] = {name: [] for name in pool.names}
    for _ in range(n):
        name = rng.choice(pool.names)
        alloc = pool.allocator(name)
        ps = alloc.page_size
        op = rng.random()
        wrote = None
        if op < 0.5:
            ids = alloc.alloc(ps * rng.randint(1, 3))
            if ids is not None:
                live[name].append(ids)
                wrote = (ids, float(rng.randint(1, 250)))
                _write(mirror_views_of(pool, name), alloc.translate_kv_loc(ids), ps, wrote[1])
        elif op < 0.85 and live[name]:
            alloc.free(live[name].pop(rng.randrange(len(live[name]))))
        elif op < 0.95:
            pool.flush(urgent=rng.random() < 0.3)
        elif op < 0.97:
            alloc.clear()
            live[name].clear()
        mirror.apply_step()
        if wrote is not None:
            v2p, views = mirror.views(name)
            _write(views, ops.translate(wrote[0], v2p, ps), ps, wrote[1])


def mirror_views_of(pool: ukv.UnifiedKVPool, name: str) -> list[torch.Tensor]:
    """The pool's own byte views of ``name``, as :meth:`_Mirror.views` lists them."""
    if isinstance(pool.spec(name), ukv.MHASpec):
        k, v = pool.kv_views(name)
        return [*k, *v]
    conv, temporal = pool.state_views(name)
    return [*conv, temporal]


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "reference"])
@pytest.mark.parametrize("middle", [False, True])
@pytest.mark.parametrize("lazy", [False, True])
def test_replayed_plans_give_the_leaders_bytes_and_tables(
    device: str, lazy: bool, middle: bool, kernel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if device == "cpu" and not kernel:  # the pool's NumPy executor, the replay's reference
        monkeypatch.setenv("TRITON_INTERPRET", "0")
    elif device == "cpu" and not ops.use_triton("cpu"):
        pytest.skip("the kernel path needs Triton's interpreter on the CPU")
    elif device != "cpu" and not kernel:
        pytest.skip("a GPU buffer always takes the kernel")
    pool = ukv.UnifiedKVPool(6 << 10, _specs(middle), page_size=2, device=device, lazy=lazy)
    mirror = _Mirror(pool, PlanTap(pool))
    assert mirror.replay.triton == kernel
    rng = random.Random(7 + lazy + 2 * middle)
    moved = 0
    for _ in range(12):
        _random_ops(mirror, rng, 10)
        mirror.check()
        moved = pool.stats().pages_moved
    assert moved > 0, "the op stream never compacted"


def test_a_step_ships_each_allocations_ids(device: str) -> None:
    pool = ukv.UnifiedKVPool(24 << 10, _specs(False), page_size=2, device=device)
    tap = PlanTap(pool)
    mirror = _Mirror(pool, tap)
    kv = pool.allocator("full")
    a = kv.alloc(4, host=True)
    assert kv.alloc(1 << 20) is None  # a failed allocation is a plan too (an empty one)
    kv.free(a[:2])
    b = kv.alloc_decode(torch.tensor([3]), torch.tensor([3]), torch.tensor([int(a[3])]), host=True)
    ids = mirror.apply_step()
    assert [len(x) for x in ids] == [4, 0, 0, 1]
    assert np.array_equal(ids[0], a.numpy()) and np.array_equal(ids[3], b.numpy())
    assert tap.labels == [] and tap.digests == []  # new_step forgot them
    mirror.check()


def test_the_tap_names_the_public_call() -> None:
    pool = ukv.UnifiedKVPool(24 << 10, _specs(False), page_size=2, device="cpu")
    tap = PlanTap(pool)
    kv = pool.allocator("full")
    ids = kv.alloc(2)
    kv.free(ids)
    pool.flush()
    assert tap.labels == ["SubPoolAllocator.alloc", "SubPoolAllocator.free"]
    with pytest.raises(ukv.PoolConfigError, match="already tapped"):
        PlanTap(pool)


def test_a_tap_set_on_a_released_pool_survives_the_resume(device: str) -> None:
    """Review round 4, F7: the tap was a monkey-patch of ``run``, which the resume's new
    executor replaced; every plan after it went unrecorded, so the check passed whatever
    the ranks did. The runtime now applies the tap whenever it binds ``run``."""
    pool = ukv.UnifiedKVPool(24 << 10, _specs(False), page_size=2, device=device)
    pool.release_memory()
    tap = PlanTap(pool)
    pool.resume_memory()
    kv = pool.allocator("full")
    ids = kv.alloc(4)
    kv.free(ids[:2])
    assert tap.labels == ["SubPoolAllocator.alloc", "SubPoolAllocator.free"]
    assert len(tap.log.records()) == 2
    with pytest.raises(ukv.ArgumentError, match="tensor-parallel"):
        pool.release_memory()  # a tapped pool is never released (the follower's is not)


def test_the_divergence_message_names_step_plan_and_calls() -> None:
    same = StepFacts([1, 2], ["SubPoolAllocator.alloc", "SubPoolAllocator.free"], ["a", "b"])
    other = StepFacts([1, 3], ["SubPoolAllocator.alloc", "SubPoolAllocator.alloc"], ["a", "c"])
    err = _explain(7, [same, other], ["full", "mamba"])
    assert isinstance(err, DivergenceError) and isinstance(err, ukv.UkvError)
    assert (err.step, err.op) == (7, 1)
    assert "step 7, plan 1" in str(err) and "rank 1: SubPoolAllocator.alloc -> c" in str(err)
    short = _explain(2, [same, StepFacts([1], ["x"], ["a"])], ["full"])
    assert short.op == 1 and "(no such plan)" in str(short)
    tables = _explain(4, [StepFacts([], [], [], [5, 6]), StepFacts([], [], [], [5, 9])], ["f", "m"])
    assert tables.op is None and tables.label == ["m"] and "sub-pools ['m']" in str(tables)


def test_a_rank_that_failed_its_step_is_named_before_any_plan() -> None:
    """Review round 4, F8: a follower that could not apply a step joins the check with a
    failure; every rank's error names it, whatever the plans were."""
    leader = StepFacts([1, 2], ["SubPoolAllocator.alloc"] * 2, ["a", "b"])
    failed = StepFacts([], [], [], failure="applying step 3 failed: RuntimeError('oom')")
    err = _explain(3, [leader, failed], ["full"])
    assert (err.step, err.op) == (3, None)
    assert "rank 1 failed to apply it (applying step 3 failed: RuntimeError('oom'))" in str(err)
    assert err.label == ["", failed.failure]


class _TwoRanks:
    """A stand-in for a two-rank group, in one process: rank 1 gathers ``peer_word``
    (None: the same word as this rank) and ``peer_facts``; this rank's values are kept."""

    rank, size = 0, 2

    def __init__(self, peer_word: int | None = None, peer_facts: object = None) -> None:
        self.peer_word, self.peer_facts = peer_word, peer_facts
        self.word: int | None = None
        self.facts: object = None

    def all_gather_word(self, value: int) -> list[int]:
        self.word = value
        return [value, value if self.peer_word is None else self.peer_word]

    def all_gather_object(self, obj: object) -> list[object]:
        self.facts = obj
        return [obj, self.peer_facts]


def _tapped_step() -> tuple[ukv.UnifiedKVPool, PlanTap, _Mirror]:
    """A pool, its tap and a mirror that has replayed one step of three plans."""
    pool = ukv.UnifiedKVPool(24 << 10, _specs(False), page_size=2, device="cpu")
    tap = PlanTap(pool)
    mirror = _Mirror(pool, tap)
    kv = pool.allocator("full")
    ids = kv.alloc(4, host=True)
    pool.allocator("mamba").alloc(1)
    kv.free(ids[:2])
    assert tap.labels == ["SubPoolAllocator.alloc"] * 2 + ["SubPoolAllocator.free"]
    return pool, tap, mirror


def _no_account() -> tuple[list[str], list[str]]:
    raise AssertionError("an account was asked for although the ranks agree")


@pytest.mark.parametrize("check_tables", [False, True])
def test_leader_and_follower_fold_a_step_into_the_same_word(check_tables: bool) -> None:
    pool, tap, mirror = _tapped_step()
    leader = _TwoRanks()
    tap.check(leader, 0, check_tables)  # type: ignore[arg-type]
    msg = tap.log.message(0).copy()
    mirror.apply_step()
    # What FollowerPool._check folds: digests of the records it received, its own tables.
    digests = [digest_words(r.words) for r in read_records(msg, mirror.lens)]
    tables = [t.cpu().numpy() for t in mirror.tables] if check_tables else None
    follower, later = _TwoRanks(), _TwoRanks()
    for group, step in ((follower, 0), (later, 1)):
        check_plans(group, step, digests, tables, _no_account, list(pool.names))  # type: ignore[arg-type]
    assert leader.word is not None and leader.word == follower.word
    assert leader.facts is None, "agreeing ranks must not exchange their accounts"
    assert later.word != leader.word, "the step number is part of the word"


def test_a_differing_peer_gets_the_taps_account_of_the_step() -> None:
    _, tap, _ = _tapped_step()
    labels = ["SubPoolAllocator.alloc", "SubPoolAllocator.alloc", "SubPoolAllocator.alloc"]
    peer = StepFacts([*tap.digests[:2], 1], labels, ["a", "b", "c"], [0, 0])
    group = _TwoRanks(peer_word=12345, peer_facts=peer)
    with pytest.raises(DivergenceError, match="step 3, plan 2") as info:
        tap.check(group, 3, check_tables=True)  # type: ignore[arg-type]
    assert info.value.label == ["SubPoolAllocator.free", "SubPoolAllocator.alloc"]
    mine = group.facts
    assert isinstance(mine, StepFacts)
    assert mine.digests == tap.digests and mine.labels == tap.labels
    assert mine.summaries == [r.describe() for r in tap.log.records()]
    assert mine.tables == [digest_words(t) for t in tap.host_tables()]


def test_a_follower_spec_must_match_the_leaders_geometry() -> None:
    pool = ukv.UnifiedKVPool(24 << 10, _specs(False), page_size=2, device="meta")
    geo = Geometry.read(pool_words(pool))
    assert spec_mismatch(geo, _specs(False)) is None
    wider = [ukv.MHASpec("full", 2, 4, 4, torch.float16, grow="up"), _specs(False)[1]]
    assert "entry_bytes" in (spec_mismatch(geo, wider) or "")
    assert "3 specs" in (spec_mismatch(geo, _specs(True)) or "")


def test_a_group_needs_an_initialised_gloo_backend() -> None:
    with pytest.raises(ukv.PoolConfigError, match="not initialised"):
        Group.of(None)


def test_presets_and_factories_take_the_rank() -> None:
    shape = preset("Nemotron-Nano-9B-v2", tp_size=4, tp_rank=3)
    assert (shape.tp_size, shape.tp_rank, shape.full.num_kv_heads) == (4, 3, 2)
    assert preset("Nemotron-Nano-9B-v2") == preset("Nemotron-Nano-9B-v2", tp_size=1)
    with pytest.raises(ukv.PoolConfigError, match="tp_rank must be in"):
        preset("Nemotron-Nano-9B-v2", tp_size=2, tp_rank=2)
    hp = ukv.build_mamba_hybrid(
        model="Jamba-1.5-Mini", tp_size=2, tp_rank=1, max_tokens=512, max_requests=2,
        max_context_len=256, device="meta",
    )  # fmt: skip
    assert hp.pool.spec("full").head_num == 4  # 8 KV heads over 2 ranks
    with pytest.raises(ukv.PoolConfigError, match="tp_rank"):
        ukv.build_swa_hybrid(
            model="gpt-oss-120b", tp_size=2, tp_rank=-1, max_tokens=512, max_requests=2,
            max_context_len=256, device="meta",
        )  # fmt: skip
    swa = ukv.build_swa_hybrid(
        model="gpt-oss-120b", tp_size=8, tp_rank=5, max_tokens=512, max_requests=2,
        max_context_len=256, device="meta",
    )  # fmt: skip
    assert swa.pool.spec("full").head_num == 1 and swa.window == 128


@pytest.mark.skipif(not ops.use_triton("cpu"), reason="the kernel path needs the interpreter")
def test_the_replayer_uses_the_plan_kernel_under_the_interpreter() -> None:
    raw = torch.zeros(1024, dtype=torch.uint8)
    assert Replayer(raw, [torch.zeros(4, dtype=torch.int64)], [64], (0,)).triton

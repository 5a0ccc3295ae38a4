"""Tensor-parallel pools in lockstep (issue 23), over real gloo process groups.

One spawn per group size runs every scenario in sequence (each spawned process imports
torch, which is what costs time on a small machine); each scenario's outcome is written
per rank to a JSON file, and the tests below read them. Scenarios:

- ``replicated-{eager,lazy}``: every rank runs its own pool on the same call stream.
- ``leader-{eager,lazy}``: rank 0 plans, the other ranks apply its plans (no core).
- in both, each rank writes its own head shard's K/V and states for every new token and
  checks, after every step, that every live request's bytes are where its ids say
  (compaction moved them identically on every rank), and tables are compared every step.
- ``diverge-replicated``: one rank makes an extra allocation at step 5; every rank must
  raise ``DivergenceError`` at step 5 naming plan 0 and the call.
- ``diverge-leader``: a follower's table row is corrupted after step 3; step 4 must raise.
- ``diverge-retire``: lazy replicated mode with one rank's forwards completing a step
  early (the timing hazard DISTRIBUTED.md names); the check must catch it.
- ``bad-follower``: a follower whose specs do not fit the leader's pool; every rank raises.
- ``demo-tp``, ``demo-tp-lazy`` (2 ranks): the demo's Mamba-hybrid model with its attention and recurrent
  heads split over the ranks (row-parallel output projections, all-reduced), its cache
  in a head-sharded ukv pool per rank in replicated mode; greedy tokens must equal the
  unsharded model's.
- ``demo-leader`` (2 ranks): the same in leader mode: the follower's cache allocates
  nothing and takes every id from rank 0's plans.

``UKV_TEST_DEVICE=cuda`` puts every rank's pool on the one GPU (gloo still carries the
collectives).
"""

from __future__ import annotations

import datetime
import json
import os
import random
import socket
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch

SCENARIOS_2 = [
    "replicated-eager",
    "replicated-lazy",
    "leader-eager",
    "leader-lazy",
    "leader-lazy+triton",
    "diverge-replicated",
    "diverge-leader",
    "diverge-retire",
    "bad-follower",
    "demo-tp",
    "demo-tp-lazy",
    "demo-leader",
]
SCENARIOS_4 = ["replicated-eager", "replicated-lazy", "leader-eager", "leader-lazy",
               "diverge-replicated"]  # fmt: skip

STEPS = 10
DIVERGE_AT = 5
CORRUPT_AFTER = 3
KV_HEADS, SSM_HEADS, HEAD_DIM, PAGE = 4, 4, 4, 2


# ----- the spawned side ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, out: str, scenarios: list[str]) -> None:
    import torch.distributed as dist

    import ukv  # noqa: F401  (its kernels are decorated under the parent's interpreter setting)

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=180),  # a rank that failed mid-collective
    )
    # The two-rank scenarios run on a subgroup of ranks 0 and 1 (one spawn for both sizes;
    # it also exercises a group other than the default one).
    groups = {world: None, 2: dist.new_group([0, 1], backend="gloo")}
    torch.set_num_threads(1)  # ranks share the machine's cores
    device = os.environ.get("UKV_TEST_DEVICE", "cpu")
    results: dict[str, Any] = {}
    try:
        for key in scenarios:
            size, name = key.split(":")
            base, _, flavour = name.partition("+")
            if device == "cpu":
                # On the CPU, Triton's interpreter costs seconds per scenario: only the
                # "+triton" ones run the kernels (the pool's packed executor, the
                # follower's replay); the rest run the NumPy / torch paths.
                os.environ["TRITON_INTERPRET"] = "1" if flavour == "triton" else "0"
            if rank < int(size):
                t0 = time.perf_counter()
                try:
                    detail = _SCENARIOS[base](rank, int(size), device, groups[int(size)])
                    results[key] = {"ok": True, "detail": detail}
                except Exception:  # reported to the test, which fails with the traceback
                    results[key] = {"ok": False, "detail": traceback.format_exc()}
                results[key]["seconds"] = time.perf_counter() - t0
            dist.barrier()
    finally:
        Path(out, f"rank{rank}.json").write_text(json.dumps(results))
        dist.destroy_process_group()


def _specs(world: int) -> list[Any]:
    """This rank's head shard of a small full-attention + Mamba model."""
    import ukv
    from ukv.models.sharding import shard_evenly, shard_kv_heads

    heads = shard_kv_heads(KV_HEADS, world)
    ssm = shard_evenly(SSM_HEADS, world, "ssm heads")
    full = ukv.MHASpec("full", 2, heads, HEAD_DIM, torch.float32, grow="up")
    mamba = ukv.MambaSpec(
        "mamba", 1, ((2, 3 * ssm),), torch.float32, (ssm, 2, 2), torch.float32, grow="down"
    )
    return [full, mamba]


class _Local:
    """What the workload needs of a rank's pool: ids, translate, views, writes."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def translate(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        return self.pool.allocator(name).translate_kv_loc(ids.to(self.pool.device))

    def kv_views(self, name: str) -> Any:
        return self.pool.kv_views(name)

    def state_views(self, name: str) -> Any:
        return self.pool.state_views(name)

    def set_kv(self, *args: Any) -> None:
        self.pool.set_kv(*args)


class _Remote(_Local):
    """The same over a follower (translate with the follower's own tables)."""

    def translate(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        return self.pool.translate(name, ids.to(self.pool.device))


def _plan_steps(seed: int) -> list[dict[str, Any]]:
    """The same schedule on every rank: who finishes, who arrives (prompt lengths)."""
    rng = random.Random(seed)
    steps, live, nxt = [], {}, 0
    for _ in range(STEPS):
        finish = sorted(r for r, left in live.items() if left == 0)
        for r in finish:
            del live[r]
        for r in live:
            live[r] -= 1
        decode = sorted(live)
        admit = []
        for _ in range(rng.choice((1, 2, 2, 3))):
            admit.append((nxt, rng.randint(1, 7)))
            live[nxt] = rng.randint(0, 4)
            nxt += 1
        steps.append({"finish": finish, "decode": decode, "admit": admit})
    return steps


class _Workload:
    """Drives one rank: allocations (leader/replicated), writes and checks (every rank)."""

    def __init__(self, rank: int, world: int, view: _Local, lazy: bool) -> None:
        self.rank, self.world, self.view, self.lazy = rank, world, view, lazy
        self.ids: dict[int, torch.Tensor] = {}  # rid -> virtual full ids (host)
        self.slot: dict[int, torch.Tensor] = {}  # rid -> virtual state slot (host)
        self.heads = _specs(world)[0].head_num
        self.steps = 0  # steps absorbed so far
        self.forward_steps = 2  # steps until a reported forward completes
        self.waits = 0  # forwards waited on by plans (lazy)
        self.new_ids: list[torch.Tensor] = []

    # -- deciding (a rank with a core) --

    def decide(self, pool: Any, plan: dict[str, Any], extra: bool = False) -> list[torch.Tensor]:
        """Issue the step's calls; returns each allocation's ids in call order."""
        full, slots = pool.allocator("full"), pool.allocator("mamba")
        got: list[torch.Tensor] = []
        if extra:
            got.append(full.alloc(PAGE))
        for r in plan["finish"]:
            full.free(self.ids[r])
            slots.free(self.slot[r])
        if self.lazy:  # every third pass urgent: it waits on the last forward (plan waits)
            pool.flush(urgent=self.steps % 3 == 2)
        if plan["admit"]:
            seq = torch.tensor([n for _, n in plan["admit"]])
            pre = torch.zeros_like(seq)
            last = torch.full_like(seq, -1)
            got.append(full.alloc_extend(pre, pre, seq, seq, last, int(seq.sum()), host=True))
            for _ in plan["admit"]:
                got.append(slots.alloc(1, host=True))
        if plan["decode"]:
            seq = torch.tensor([len(self.ids[r]) + 1 for r in plan["decode"]])
            last = torch.stack([self.ids[r][-1] for r in plan["decode"]])
            got.append(full.alloc_decode(seq, seq, last, host=True))
        return [g.cpu() for g in got]

    # -- every rank --

    def absorb(self, plan: dict[str, Any], got: list[torch.Tensor]) -> None:
        """Book the step's ids (in :meth:`decide`'s order), then write the new rows."""
        for r in plan["finish"]:
            del self.ids[r], self.slot[r]
        it = iter(got)
        new: list[tuple[int, int, int]] = []  # (rid, first new position, count)
        if plan["admit"]:
            ext = next(it)
            a = 0
            for r, n in plan["admit"]:
                self.ids[r] = ext[a : a + n].clone()
                new.append((r, 0, n))
                a += n
            for r, _ in plan["admit"]:
                self.slot[r] = next(it)
                self._write_state(r)
        if plan["decode"]:
            dec = next(it)
            for i, r in enumerate(plan["decode"]):
                new.append((r, len(self.ids[r]), 1))
                self.ids[r] = torch.cat([self.ids[r], dec[i : i + 1]])
        assert next(it, None) is None, "more allocations than the schedule made"
        for r, start, n in new:
            self._write_kv(r, start, n)
        self.new_ids = [self.ids[r][start : start + n] for r, start, n in new]
        self.steps += 1

    def report_forward(self, pool: Any) -> None:
        """Lazy mode: the step's "forward" (the writes above) is reported in flight; it
        completes two steps later unless a plan waits on it first."""
        if not self.lazy:
            return
        event = _Forward(self)
        if hasattr(pool, "allocator"):  # a pool with a core: it also learns the write set
            # host ids: a GPU write set lands when its copy does (a timing hazard)
            pool.set_inflight_forward(event, torch.cat(self.new_ids))
        else:
            pool.set_inflight_forward(event)

    def _k(self, rid: int, pos: torch.Tensor, layer: int) -> torch.Tensor:
        """This rank's head shard of request ``rid``'s K at ``pos`` (exact in float32)."""
        head = torch.arange(self.heads) + self.rank * self.heads * (self.heads < KV_HEADS)
        val = rid * 1000.0 + pos[:, None].float() + 0.25 * head[None, :] + 0.125 * layer
        return val[..., None].expand(-1, -1, HEAD_DIM).contiguous()

    def _write_kv(self, rid: int, start: int, n: int) -> None:
        pos = torch.arange(start, start + n)
        loc = self.view.translate("full", self.ids[rid][start : start + n])
        for layer in range(2):
            k = self._k(rid, pos, layer).to(loc.device)
            self.view.set_kv("full", layer, loc, k, -k)

    def _state_value(self, rid: int) -> float:
        return rid * 10.0 + self.rank + 0.5

    def _write_state(self, rid: int) -> None:
        conv, temporal = self.view.state_views("mamba")
        s = self.view.translate("mamba", self.slot[rid])
        conv[0][:, s] = self._state_value(rid)
        temporal[:, s] = -self._state_value(rid)

    def verify(self) -> None:
        """Every live request's K/V and state are where its virtual ids say."""
        ks, vs = self.view.kv_views("full")
        conv, temporal = self.view.state_views("mamba")
        for r, ids in self.ids.items():
            phys = self.view.translate("full", ids)  # on the pool's device
            pos = torch.arange(len(ids))
            for layer in range(2):
                got = ks[layer][phys // PAGE, phys % PAGE].cpu()
                want = self._k(r, pos, layer)
                assert torch.equal(got, want), f"K of request {r} layer {layer} moved wrongly"
                assert torch.equal(vs[layer][phys // PAGE, phys % PAGE].cpu(), -want)
            s = self.view.translate("mamba", self.slot[r])
            assert bool((conv[0][:, s] == self._state_value(r)).all()), f"state of {r}"
            assert bool((temporal[:, s] == -self._state_value(r)).all()), f"state of {r}"


class _Forward:
    """Stands in for a forward's CUDA event, deterministically on every rank."""

    def __init__(self, work: _Workload) -> None:
        self.work, self.start, self.waited = work, work.steps, False

    def query(self) -> bool:
        return self.waited or self.work.steps >= self.start + self.work.forward_steps

    def synchronize(self) -> None:
        if not self.query():
            self.work.waits += 1
        self.waited = True


def _pool(world: int, device: str, lazy: bool) -> Any:
    import ukv

    return ukv.UnifiedKVPool(1 << 16, _specs(world), page_size=PAGE, device=device, lazy=lazy)


def _replicated(
    rank: int,
    world: int,
    device: str,
    group: Any,
    lazy: bool,
    diverge: bool = False,
    skew: bool = False,
) -> Any:
    from ukv.distributed import DivergenceError, ReplicatedPool

    pool = _pool(world, device, lazy)
    tp = ReplicatedPool(pool, group, check_tables=True)
    work = _Workload(rank, world, _Local(pool), lazy)
    if skew and rank == world - 1:
        work.forward_steps = 0  # its forwards finish at once: retirement differs
    moves = 0
    for s, plan in enumerate(_plan_steps(seed=world)):
        odd = diverge and s == DIVERGE_AT and rank == world - 1
        got = work.decide(pool, plan, extra=odd)
        try:
            tp.step()
        except DivergenceError as e:
            return {"step": e.step, "op": e.op, "label": e.label, "message": str(e)}
        work.absorb(plan, got[1:] if odd else got)
        work.verify()
        work.report_forward(pool)
        moves = pool.stats().pages_moved
    pool.check_invariants()
    assert moves > 0, "the workload never compacted: it proves nothing about moves"
    return {"moves": moves, "steps": tp.step_index, "waits": work.waits}


def _leader(
    rank: int, world: int, device: str, group: Any, lazy: bool, corrupt: bool = False
) -> Any:
    from ukv.distributed import DivergenceError, FollowerPool, LeaderPool

    # lazy: messages cut at 64 words, so most steps take the two-broadcast path
    chunk = 64 if lazy else 1024
    if rank == 0:
        pool = _pool(world, device, lazy)
        tp: Any = LeaderPool(pool, group, check_tables=True, chunk_words=chunk)
        work = _Workload(rank, world, _Local(pool), lazy)
    else:
        tp = FollowerPool(_specs(world), group, device=device, check_tables=True, chunk_words=chunk)
        work = _Workload(rank, world, _Remote(tp), lazy)
    for s, plan in enumerate(_plan_steps(seed=world)):
        try:
            if rank == 0:
                got = work.decide(pool, plan)
                tp.step()
            else:
                got = [g.cpu() for g in tp.step().ids]
        except DivergenceError as e:
            return {"step": e.step, "op": e.op, "label": e.label, "message": str(e)}
        work.absorb(plan, got)
        work.verify()
        work.report_forward(pool if rank == 0 else tp)
        if corrupt and rank == world - 1 and s == CORRUPT_AFTER:
            tp._tables[0][3] += 1  # a follower's v2p row goes wrong behind the check's back
    if rank == 0:
        pool.check_invariants()
        return {
            "moves": pool.stats().pages_moved,
            "broadcasts": tp.channel.broadcasts,
            "waits": work.waits,
        }
    return {"steps": tp.step_index, "waits": work.waits}


def _bad_follower(rank: int, world: int, device: str, group: Any) -> Any:
    import ukv
    from ukv.distributed import FollowerPool, LeaderPool, ReplicatedPool

    errors = []
    specs = _specs(world)
    wrong = ukv.MHASpec("full", 2, 8, HEAD_DIM, torch.float32, grow="up")
    for follower_specs, tables in (([wrong, specs[1]], False), (specs, rank == 1)):
        try:
            if rank == 0:
                LeaderPool(_pool(world, device, False), group)
            else:
                FollowerPool(follower_specs, group, device=device, check_tables=tables)
        except ukv.PoolConfigError as e:
            errors.append(str(e))
    try:
        ReplicatedPool(_pool(world, device, False), group, check_tables=rank == 1)
    except ukv.PoolConfigError as e:
        errors.append(str(e))
    return {"errors": errors}


def _demo_tp(rank: int, world: int, device: str, group: Any, lazy: bool = False) -> Any:
    """The demo model, heads split over the ranks, against the unsharded model."""
    import torch.distributed as dist

    from ukv.demo.model import HybridModel, ModelConfig
    from ukv.demo.reference import ReferenceCache
    from ukv.demo.run import _usable_bytes, compare
    from ukv.demo.serve import Budget, make_trace, run_pooled, run_reference
    from ukv.distributed import ReplicatedPool

    cfg = ModelConfig(variant="mamba", seed=3)
    full = HybridModel(cfg, device)
    model = _ShardedModel(full, world, rank, group)
    trace = make_trace(10, cfg.vocab, seed=3)
    for r in trace:  # shorter prompts: the test's budget is CPU seconds
        r.prompt = r.prompt[:24]
    cache = _TPCache(
        model.cfg,
        total_bytes=160 << 10,
        max_context_len=max(r.num_tokens for r in trace),
        dtype=torch.float32,
        page_size=4,
        device=device,
        lazy=lazy,
    )
    cache.tp = ReplicatedPool(cache.pool, group, check_tables=True)
    sched = dict(max_running=6, chunk=8, prefill_budget=16)
    run = run_pooled(model, cache, trace, Budget(_usable_bytes(cache)), **sched)
    moves = cache.pool.stats().pages_moved
    result: dict[str, Any] = {"moves": moves, "steps": cache.tp.step_index}
    if rank == 0:
        ref = run_reference(full, ReferenceCache(cfg, torch.float32, device), trace, run.schedule)
        same_tokens = all(a.outputs == b.outputs for a, b in zip(run.requests, ref, strict=True))
        _, diff = compare(run.requests, ref, exact=False)
        result.update(tokens=sum(len(r.outputs) for r in ref), same=same_tokens, diff=diff)
    dist.barrier(group)
    return result


def _demo_leader(rank: int, world: int, device: str, group: Any) -> Any:
    """The sharded demo model with rank 0's cache in a LeaderPool and the other ranks'
    in FollowerPools (ids from rank 0's plans), against the unsharded model."""
    import torch.distributed as dist

    from ukv.demo.model import HybridModel, ModelConfig
    from ukv.demo.reference import ReferenceCache
    from ukv.demo.run import _usable_bytes, compare
    from ukv.demo.serve import Budget, make_trace, run_pooled, run_reference
    from ukv.distributed import FollowerPool, LeaderPool

    cfg = ModelConfig(variant="mamba", seed=4)
    full = HybridModel(cfg, device)
    model = _ShardedModel(full, world, rank, group)
    trace = make_trace(10, cfg.vocab, seed=4)
    for r in trace:
        r.prompt = r.prompt[:24]
    ctx = max(r.num_tokens for r in trace)
    usable = torch.zeros(1, dtype=torch.int64)
    if rank == 0:
        cache: Any = _TPCache(
            model.cfg, total_bytes=160 << 10, max_context_len=ctx, dtype=torch.float32,
            page_size=4, device=device, lazy=False,
        )  # fmt: skip
        cache.tp = LeaderPool(cache.pool, group, check_tables=True)
        usable[0] = _usable_bytes(cache)
    else:
        fp = FollowerPool(_demo_specs(model.cfg), group, device=device, check_tables=True)
        cache = _FollowerDemoCache(model.cfg, fp)
    dist.broadcast(usable, dist.get_global_rank(group, 0) if group is not None else 0, group)
    sched = dict(max_running=6, chunk=8, prefill_budget=16)
    run = run_pooled(model, cache, trace, Budget(int(usable[0])), **sched)
    result: dict[str, Any] = {"outputs": [r.outputs for r in run.requests]}
    if rank == 0:
        result["moves"] = cache.pool.stats().pages_moved
        ref = run_reference(full, ReferenceCache(cfg, torch.float32, device), trace, run.schedule)
        result["same"] = all(a.outputs == b.outputs for a, b in zip(run.requests, ref, strict=True))
        result["diff"] = compare(run.requests, ref, exact=False)[1]
    else:
        result["steps"] = fp.step_index
    dist.barrier(group)
    return result


def _demo_specs(cfg: Any) -> list[Any]:
    """The specs ``MambaPooledCache`` builds for ``cfg`` (this rank's shard)."""
    import ukv

    full = ukv.MHASpec("full", cfg.num_full, cfg.kv_heads, cfg.head_dim, torch.float32, grow="up")
    mamba = ukv.MambaSpec(
        "mamba", cfg.num_other, ((cfg.conv_width - 1, cfg.conv_channels),), torch.float32,
        (cfg.ssm_heads, cfg.ssm_dim, cfg.ssm_dim), torch.float32, grow="down",
    )  # fmt: skip
    return [full, mamba]


class _FollowerShim:
    """What the demo's cache and serving loop ask of ``cache.pool``, over a follower."""

    lazy = False

    def __init__(self, fp: Any) -> None:
        self.fp, self.device = fp, fp.device

    def __getattr__(self, name: str) -> Any:  # kv_views, state_views, set_kv, spec
        return getattr(self.fp, name)

    def flush(self, urgent: bool = False) -> int:
        return 0  # the leader flushes; its moves arrive with the step

    def stats(self) -> None:
        return None

    def check_invariants(self) -> None:
        return None


class _FollowerDemoCache:
    """``MambaPooledCache`` on a follower: no allocations; each step's ids come from the
    leader's plans (its state slots, in admission order, then the extend's tokens)."""

    def __new__(cls, cfg: Any, fp: Any) -> Any:
        from ukv.demo.pooled import MambaPooledCache, _PooledCache

        class FollowerCache(MambaPooledCache):
            def __init__(self) -> None:
                _PooledCache.__init__(self, cfg, torch.float32, 4)
                self.pool = _FollowerShim(fp)  # type: ignore[assignment]
                self._slot, self._phys_slot, self._new = {}, {}, []

            def admit(self, rid: int) -> None:
                self._ids[rid] = torch.empty(0, dtype=torch.int64)
                self._new.append(rid)

            def prepare(self, batch: list[tuple[int, int]]) -> None:
                got = iter(g.cpu() for g in fp.step().ids)
                conv, temporal = fp.state_views("mamba")
                for rid in self._new:
                    self._slot[rid] = next(got)
                    s = fp.translate("mamba", self._slot[rid].to(fp.device))
                    conv[0][:, s] = 0
                    temporal[:, s] = 0
                self._new = []
                new, a = next(got), 0
                assert next(got, None) is None, "the leader allocated more than the schedule"
                for r, n in batch:
                    self._ids[r] = torch.cat([self._ids[r], new[a : a + n]])
                    a += n
                for r, _ in batch:
                    ids = self._ids[r].to(fp.device)
                    self._phys[(True, r)] = fp.translate("full", ids)
                    self._phys_slot[r] = int(fp.translate("mamba", self._slot[r].to(fp.device))[0])

            def release(self, rid: int) -> None:
                del self._ids[rid], self._slot[rid]

        return FollowerCache()


class _TPCache:
    """``MambaPooledCache`` whose step ends with the replicated-mode check."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from ukv.demo.pooled import MambaPooledCache

        class TPCache(MambaPooledCache):
            tp: Any = None

            def prepare(self, batch: list[tuple[int, int]]) -> None:
                super().prepare(batch)
                self.tp.step()

        return TPCache(*args, **kwargs)


class _ShardedModel:
    """One rank's shard of the demo model: attention and recurrent heads split evenly,
    K/V heads split (``ukv.models.sharding`` rules), output projections row-parallel
    and all-reduced; embeddings, MLPs and the head replicated."""

    def __init__(self, full: Any, world: int, rank: int, group: Any) -> None:
        import dataclasses

        from ukv.demo.model import HybridModel
        from ukv.models.sharding import shard_evenly, shard_kv_heads

        c = full.cfg
        nq, nkv = shard_evenly(c.q_heads, world, "q heads"), shard_kv_heads(c.kv_heads, world)
        nh = shard_evenly(c.ssm_heads, world, "ssm heads")
        self.cfg = dataclasses.replace(c, q_heads=nq, kv_heads=nkv, ssm_heads=nh)
        self.group = group
        self.inner = HybridModel.__new__(HybridModel)
        self.inner.cfg, self.inner.device = self.cfg, full.device
        self.inner.embed, self.inner.head = full.embed, full.head
        hd, D = c.head_dim, c.ssm_dim

        def cols(w: Any, start: int, blocks: list[tuple[int, int]]) -> Any:
            return torch.cat([w[:, start + a : start + a + n] for a, n in blocks], dim=1)

        self.inner.layers = []
        for layer, p in enumerate(full.layers):
            q = p["in"]
            if c.is_full(layer):
                qa, ka = rank * nq * hd, rank * nkv * hd
                kv0 = c.q_heads * hd
                w_in = cols(q, 0, [(qa, nq * hd), (kv0 + ka, nkv * hd),
                                   (kv0 + c.kv_heads * hd + ka, nkv * hd)])  # fmt: skip
                out = p["out"][qa : qa + nq * hd]
                s = {"in": w_in, "out": out}
            else:
                H, a = c.ssm_heads, rank * nh * D
                conv_blocks = [(part * H * D + a, nh * D) for part in range(3)]
                C = 3 * H * D
                w_in = torch.cat(
                    [cols(q, 0, conv_blocks), q[:, C + rank * nh : C + (rank + 1) * nh],
                     q[:, C + H + a : C + H + a + nh * D]], dim=1)  # fmt: skip
                s = {"in": w_in, "conv": cols(p["conv"], 0, conv_blocks),
                     "out": p["out"][a : a + nh * D]}  # fmt: skip
            s["up"], s["down"] = p["up"], p["down"]
            self.inner.layers.append(s)

    def forward(self, chunks: Any, cache: Any) -> torch.Tensor:
        """``HybridModel.forward`` with the output projections all-reduced."""
        import torch.distributed as dist

        from ukv.demo import model as m

        inner, cfg = self.inner, self.cfg
        dev = inner.device
        x = inner.embed[torch.cat([c.tokens for c in chunks]).to(dev)]
        pos = torch.cat([torch.arange(c.start, c.start + len(c.tokens)) for c in chunks]).to(dev)
        groups, last = m._groups(chunks, dev)
        counts = [0, 0]
        for layer, p in enumerate(inner.layers):
            full = cfg.is_full(layer)
            index = counts[full]
            counts[full] += 1
            h = m._rms(x) @ p["in"]
            y = torch.empty(h.shape[0], p["out"].shape[0], device=dev)
            for g in groups:
                if full:
                    y[g.rows] = inner._attention(h[g.rows], pos[g.rows], g, cache, True, index)
                else:
                    y[g.rows] = inner._recurrent(h[g.rows], p, g, cache, index)
            part = (y @ p["out"]).cpu()
            dist.all_reduce(part, group=self.group)
            x = x + part.to(dev)
            x = x + torch.nn.functional.gelu(m._rms(x) @ p["up"]) @ p["down"]
        return m._rms(x[last]) @ inner.head


_SCENARIOS: dict[str, Any] = {
    "replicated-eager": lambda r, w, d, g: _replicated(r, w, d, g, lazy=False),
    "replicated-lazy": lambda r, w, d, g: _replicated(r, w, d, g, lazy=True),
    "leader-eager": lambda r, w, d, g: _leader(r, w, d, g, lazy=False),
    "leader-lazy": lambda r, w, d, g: _leader(r, w, d, g, lazy=True),
    "diverge-replicated": lambda r, w, d, g: _replicated(r, w, d, g, lazy=False, diverge=True),
    "diverge-leader": lambda r, w, d, g: _leader(r, w, d, g, lazy=False, corrupt=True),
    "diverge-retire": lambda r, w, d, g: _replicated(r, w, d, g, lazy=True, skew=True),
    "bad-follower": _bad_follower,
    "demo-tp": _demo_tp,
    "demo-tp-lazy": lambda r, w, d, g: _demo_tp(r, w, d, g, lazy=True),
    "demo-leader": _demo_leader,
}


# ----- the pytest side ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, Any]]]:
    """Every scenario's outcome per group size, per rank (one spawn of four ranks)."""
    import torch.multiprocessing as mp

    tmp = tmp_path_factory.mktemp("tp")
    keys = [f"2:{n}" for n in SCENARIOS_2] + [f"4:{n}" for n in SCENARIOS_4]
    mp.start_processes(
        _worker, args=(4, _free_port(), str(tmp), keys), nprocs=4, join=True, start_method="spawn"
    )
    per_rank = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(4)]
    return {
        size: [{k.split(":")[1]: v for k, v in res.items() if k.startswith(f"{size}:")}
               for res in per_rank[:size]]
        for size in (2, 4)
    }  # fmt: skip


def _ok(results: list[dict[str, Any]], name: str) -> list[Any]:
    for rank, res in enumerate(results):
        assert res[name]["ok"], f"rank {rank} of {name}:\n{res[name]['detail']}"
    return [res[name]["detail"] for res in results]


@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("name", ["replicated-eager", "replicated-lazy"])
def test_replicated_ranks_stay_in_lockstep(ranks: Any, name: str, size: int) -> None:
    details = _ok(ranks[size], name)
    assert all(d["steps"] == STEPS for d in details)
    assert len({d["moves"] for d in details}) == 1, "ranks moved different page counts"
    if "lazy" in name:  # urgent flushes waited on in-flight forwards, alike on every rank
        assert details[0]["waits"] > 0 and len({d["waits"] for d in details}) == 1, details


@pytest.mark.parametrize(
    "name,size",
    [("leader-eager", 2), ("leader-eager", 4), ("leader-lazy", 2), ("leader-lazy", 4),
     ("leader-lazy+triton", 2)],
)  # fmt: skip
def test_followers_apply_the_leaders_plans(ranks: Any, name: str, size: int) -> None:
    details = _ok(ranks[size], name)
    assert details[0]["moves"] > 0, "the leader never compacted"
    assert all(d["steps"] == STEPS for d in details[1:])
    if "lazy" in name:  # cut at 64 words: the long messages took a second broadcast
        assert details[0]["broadcasts"] > STEPS + 1, details[0]
        # the followers waited on their own forwards where the leader's plans waited
        assert details[0]["waits"] > 0 and len({d["waits"] for d in details}) == 1, details


@pytest.mark.parametrize("size", [2, 4])
def test_a_divergent_rank_is_caught_at_its_step(ranks: Any, size: int) -> None:
    for d in _ok(ranks[size], "diverge-replicated"):
        # every rank raises, at the step and plan where the last rank differed
        assert (d["step"], d["op"]) == (DIVERGE_AT, 0), d
        assert d["label"][-1] == "SubPoolAllocator.alloc", d
        assert f"step {DIVERGE_AT}, plan 0" in d["message"]


def test_lazy_retirement_out_of_step_is_caught(ranks: Any) -> None:
    """Replicated lazy mode's documented hazard: one rank's forwards complete (and are
    retired) at once, the others' two steps later, so that rank's flushes move pages
    (pending pages, state slots) the others may not yet: the first plan that differs is
    caught, on every rank alike."""
    details = _ok(ranks[2], "diverge-retire")
    assert details[0]["op"] is not None and details[0]["step"] < STEPS, details[0]
    assert len({(d["step"], d["op"]) for d in details}) == 1, details
    assert "page moves" in details[0]["message"], details[0]


def test_a_corrupted_follower_table_is_caught(ranks: Any) -> None:
    for d in _ok(ranks[2], "diverge-leader"):
        assert (d["step"], d["op"]) == (CORRUPT_AFTER + 1, None), d
        assert d["label"] == ["full"], d


def test_a_follower_with_other_specs_or_checks_is_refused_on_every_rank(ranks: Any) -> None:
    for d in _ok(ranks[2], "bad-follower"):
        specs, checks, replicated = d["errors"]
        assert "rank 1" in specs and "entry_bytes" in specs, d
        assert "rank 1" in checks and "check_tables=True" in checks, d
        assert "check settings on rank 1" in replicated, d


@pytest.mark.parametrize("name", ["demo-tp", "demo-tp-lazy"])
def test_demo_model_sharded_over_two_ranks_matches_one_rank(ranks: Any, name: str) -> None:
    details = _ok(ranks[2], name)
    assert details[0]["same"], f"greedy tokens differ (max logit diff {details[0]['diff']})"
    assert details[0]["tokens"] > 0
    assert details[0]["diff"] < 1e-3, details[0]
    assert len({(d["moves"], d["steps"]) for d in details}) == 1
    assert details[0]["moves"] > 0, "the demo run never compacted"


def test_demo_model_in_leader_mode_matches_one_rank(ranks: Any) -> None:
    details = _ok(ranks[2], "demo-leader")
    assert details[0]["same"], f"greedy tokens differ (max logit diff {details[0]['diff']})"
    assert details[0]["diff"] < 1e-3 and details[0]["moves"] > 0, details[0]
    assert details[1]["outputs"] == details[0]["outputs"], "the follower generated other tokens"
    assert details[1]["steps"] > 0

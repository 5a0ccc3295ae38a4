"""A follower rank in leader mode: a buffer and tables, no core of its own.

The follower builds its byte buffer and ``[v2p | p2v]`` tables from the geometry the
leader sends at construction (checking its own specs, its head shard, against it), then
at every step receives the leader's plans and applies them with the leader's kernel
(:mod:`ukv.distributed.replay`). It serves what a model worker needs: K/V and state
views, ``set_kv``, ``translate``, and the ids each of the leader's allocations returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import torch

from ukv import _convert, layout, ops
from ukv.distributed.digest import digest_words
from ukv.distributed.divergence import check_failed, check_plans
from ukv.distributed.geometry import WORDS, Geometry, spec_mismatch
from ukv.distributed.group import Group
from ukv.distributed.leader import agree, check_modes
from ukv.distributed.replay import Replayer
from ukv.distributed.transport import CHUNK_WORDS, Channel
from ukv.distributed.wire import MSG_HEADER, Record, read_records
from ukv.errors import ArgumentError, PoolConfigError, PoolPoisonedError
from ukv.execution.base import PLAN_MOVES
from ukv.execution.forwards import Forwards
from ukv.specs import MambaSpec, MHASpec, Spec

__all__ = ["FollowerPool", "FollowerStep"]


@dataclass(frozen=True)
class FollowerStep:
    """What one step brought.

    Attributes:
        step: The step index.
        ids: The ids each of the leader's allocations returned this step, in call
            order (one int64 tensor per plan that returned ids, on the pool's device).
        plans: Number of plans applied.
    """

    step: int
    ids: list[torch.Tensor]
    plans: int


class FollowerPool:
    """A non-leader rank's pool in leader mode.

    Args:
        specs: This rank's specs (its head shard), in the leader pool's order.
        group: The gloo group the leader uses (this rank is not 0).
        device: Where the buffer and tables live (``cuda``, ``cuda:N`` or ``cpu``).
        check, check_tables, chunk_words: As for
            :class:`~ukv.distributed.leader.LeaderPool` (must match the leader's).

    Raises:
        PoolConfigError: The specs do not fit the leader's geometry (every rank raises).
    """

    def __init__(
        self,
        specs: Sequence[Spec],
        group: Any = None,
        *,
        device: str | torch.device = "cuda",
        check: bool = True,
        check_tables: bool = False,
        chunk_words: int = CHUNK_WORDS,
    ) -> None:
        self.group = Group.of(group)
        if self.group.rank == 0:
            raise PoolConfigError("invalid rank 0 for FollowerPool: rank 0 is the leader")
        self.device = torch.device(device)
        self.check = bool(check)
        self.check_tables = bool(check_tables)
        self.step_index = 0
        self.channel = Channel(self.group, chunk_words)
        hello = self.channel.receive()
        geo = Geometry.read(hello[2 : 2 + WORDS])
        problem = spec_mismatch(geo, list(specs))
        if int(hello[1]) != check_modes(self.check, self.check_tables):
            problem = (
                f"check={self.check}, check_tables={self.check_tables} but the leader's "
                f"are check={bool(hello[1] & 1)}, check_tables={bool(hello[1] & 2)}"
            )
        agree(self.group, problem)
        self.geometry = geo
        self._specs = list(specs)
        self._index = {s.name: i for i, s in enumerate(self._specs)}
        self.raw = torch.zeros(geo.total_bytes, dtype=torch.uint8, device=self.device)
        self._tables = self._load_tables(hello[2 + WORDS :])
        # A sub-pool's words (geometry.POOL_WORDS): entry bytes, page size, page bytes, pages, …
        self._views = [
            layout.views_for(self.raw, s, words[1], words[3])
            for s, words in zip(self._specs, geo.pools)
        ]
        self._replay = Replayer(self.raw, self._tables, [p[2] for p in geo.pools], geo.move_order)
        # The forwards reported, numbered as on the leader (no core to retire them in).
        self._forwards = Forwards()
        self._eager_waits = not geo.lazy
        self._store: dict[str, list[ops.StoreTarget]] = {}
        # Why a step could not be applied (then every later call raises), None while sound.
        self.poisoned: str | None = None

    def _load_tables(self, words: np.ndarray) -> list[torch.Tensor]:
        out, at = [], 0
        for i in range(len(self.geometry.pools)):
            n = self.geometry.table_len(i)
            out.append(torch.from_numpy(words[at : at + n].copy()).to(self.device))
            at += n
        return out

    # ----- steps ---------------------------------------------------------------------------

    def step(self) -> FollowerStep:
        """Receive the leader's plans of this step, apply them in order, compare ranks.

        Returns:
            The ids the leader's allocations returned, in call order.

        Raises:
            DivergenceError: This rank's tables (or received plans) differ from the
                leader's (with ``check_tables``), naming the step; or this rank failed to
                receive or apply the step (with ``check``: every rank raises it, naming
                this rank's failure, which is also the ``__cause__`` here).
            PoolPoisonedError: A step failed before (this rank's bytes and tables may be
                half-applied, so every later call raises); or this one failed with
                ``check=False`` (the other ranks are not told).
        """
        self.check_usable()
        step = self.step_index
        try:
            msg = self.channel.receive()
            step = int(msg[1])
            records, ids = self._apply(msg)
        except BaseException as exc:  # any failure leaves the step half-applied
            self._fail(step, exc)
        self.step_index = step + 1
        if self.check:
            self._check(step, records)
        return FollowerStep(step, ids, len(records))

    def _apply(self, msg: np.ndarray) -> tuple[list[Record], list[torch.Tensor]]:
        """Apply every record of a step message; the ids each allocation returned."""
        records = read_records(msg, [self.geometry.table_len(i) for i in range(len(self._tables))])
        dev = torch.from_numpy(msg)
        if self.device.type != "cpu":
            dev = dev.to(self.device)
        ids = []
        for rec in records:
            at = _offset(msg, rec.payload)
            payload = dev[at : at + len(rec.payload)]
            self._forwards.wait(rec.waits.tolist())
            if rec.flags & PLAN_MOVES and self._eager_waits and self._forwards:
                # As the leader's eager executor does: moves after every unretired forward.
                self._forwards.wait(list(self._forwards.events))
            self._replay.apply(rec, payload)
            if rec.tokens[1]:
                t_at, n = rec.tokens
                got = payload[t_at : t_at + n]
                ids.append(got.clone() if self.device.type == "cpu" else got)
        self._forwards.retire(None)
        return records, ids

    def _fail(self, step: int, exc: BaseException) -> NoReturn:
        """Poison this rank after a step it could not apply, and (with ``check``) still
        join the step's check, so every rank raises instead of the leader waiting for this
        rank's word forever (review round 4, F8)."""
        self.poisoned = f"applying step {step} failed: {exc!r}"
        self.step_index = step + 1
        if not self.check:
            raise PoolPoisonedError(f"the follower is unusable: {self.poisoned}") from exc
        err = check_failed(self.group, step, self.poisoned, [s.name for s in self._specs])
        if not isinstance(exc, Exception):
            raise exc  # an interrupt stays an interrupt; the other ranks have their error
        raise err from exc

    def check_usable(self) -> None:
        """Raise :class:`~ukv.errors.PoolPoisonedError` if a step failed on this rank."""
        if self.poisoned is not None:
            raise PoolPoisonedError(f"the follower is unusable: {self.poisoned}")

    def _check(self, step: int, records: list[Record]) -> None:
        digests = [digest_words(r.words) for r in records]
        tables = [t.cpu().numpy() for t in self._tables] if self.check_tables else None

        def account() -> tuple[list[str], list[str]]:
            labels = ["(applied from the leader)"] * len(records)
            return labels, [r.describe() for r in records]

        check_plans(self.group, step, digests, tables, account, [s.name for s in self._specs])

    def set_inflight_forward(self, event: Any) -> None:
        """Report a forward just launched, at the same point the leader reports its own
        (tokens are numbered alike on every rank): plans that move pages it may read
        wait for ``event`` here as they do on the leader."""
        self.check_usable()
        if not hasattr(event, "query"):
            raise ArgumentError(f"bad argument event = {event!r}: needs a query() method")
        self._forwards.report(event, None)

    # ----- what a model worker uses ------------------------------------------------------

    def _idx(self, name: str) -> int:
        """The index of sub-pool ``name``; refuses every use of a poisoned follower."""
        if self.poisoned is not None:
            self.check_usable()
        return _convert.sub_pool_index(self._index, name)

    @property
    def names(self) -> tuple[str, ...]:
        """Sub-pool names, in the leader pool's order."""
        return tuple(self._index)

    def spec(self, name: str) -> Spec:
        """This rank's spec of sub-pool ``name``."""
        return self._specs[self._idx(name)]

    def v2p(self, name: str) -> torch.Tensor:
        """This rank's virtual → physical page table of ``name`` (shape ``[V + 1]``)."""
        i = self._idx(name)
        return self._tables[i][: self.geometry.pools[i][6]]

    def p2v(self, name: str) -> torch.Tensor:
        """This rank's physical → virtual page table of ``name`` (shape ``[P + 1]``)."""
        i = self._idx(name)
        return self._tables[i][self.geometry.pools[i][6] :]

    def translate(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """Virtual ids of ``name`` → physical ids (as ``translate_kv_loc``; for a sub-pool
        bound to another's ids, as ``translate_loc_from_full_to_swa`` but int64)."""
        i = self._idx(name)
        return ops.translate(ids, self.v2p(name), self.geometry.pools[i][1])

    def kv_views(self, name: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer K and V views of an MHA sub-pool (as ``UnifiedKVPool.kv_views``)."""
        i = self._idx(name)
        if not isinstance(self._specs[i], MHASpec):
            raise ArgumentError(f"bad argument name = {name!r}: not an MHA sub-pool")
        k, v = self._views[i]
        return k, v

    def state_views(self, name: str) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Conv and temporal views of a Mamba sub-pool (as ``UnifiedKVPool.state_views``)."""
        i = self._idx(name)
        if not isinstance(self._specs[i], MambaSpec):
            raise ArgumentError(f"bad argument name = {name!r}: not a Mamba sub-pool")
        conv, temporal = self._views[i]
        return conv, temporal

    def set_kv(
        self, name: str, layer: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Store K/V rows at physical ids (as ``UnifiedKVPool.set_kv``)."""
        if self.poisoned is not None:
            self.check_usable()
        targets = self._store.get(name)
        if targets is None:
            spec = self.spec(name)
            ks, vs = self.kv_views(name)
            fp8 = spec.dtype if spec.store_dtype != spec.dtype else None  # type: ignore[attr-defined]
            targets = [ops.store_target(kl, vl, fp8) for kl, vl in zip(ks, vs)]
            self._store[name] = targets
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(targets):
            raise ArgumentError(
                f"bad argument layer = {layer!r}: sub-pool {name!r} has {len(targets)} layers"
            )
        ops.store_kv_to(targets[layer], loc, k, v)

    def __repr__(self) -> str:
        return (
            f"FollowerPool(rank {self.group.rank}, {self.geometry.total_bytes} bytes on "
            f"{self.device}, sub-pools {list(self._index)}, step {self.step_index})"
        )


def _offset(msg: np.ndarray, part: np.ndarray) -> int:
    """Word offset of view ``part`` inside ``msg``."""
    at = (part.__array_interface__["data"][0] - msg.__array_interface__["data"][0]) // 8
    assert MSG_HEADER <= at <= len(msg), f"payload at word {at} outside a {len(msg)}-word message"
    return int(at)

"""Continuous batching: requests arrive, prefill in chunks, decode in batches, finish, free.

The scheduler admits a waiting request when its worst-case bytes fit a :class:`Budget`
(the pool's usable bytes as one shared budget, or a static split of the same bytes, which
is what a per-kind pool would give), so allocation in the pool never fails for lack of
room and no request is ever preempted. One step's batch is every running request: a
prefill chunk for those still reading their prompt (up to a per-step prefill budget), one
token for those decoding. The pooled run records its schedule (the batches, step by
step); the reference replays the same batches, so both run the same shapes through the
same math and any difference in their outputs comes from the bytes the cache gave back.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ukv.demo.model import Chunk, HybridModel


@dataclass
class Request:
    """One request of the trace and its progress.

    Attributes:
        rid: Request id.
        arrival: The step at which it arrives.
        prompt: shape ``[P]`` int64 prompt tokens.
        max_new: Tokens to generate (no stop token: lengths are fixed by the trace).
        pos: Tokens fed to the model so far.
        outputs: Greedy tokens generated so far.
        logits: Logits rows (float32, ``[vocab]``) that chose each output.
    """

    rid: int
    arrival: int
    prompt: torch.Tensor
    max_new: int
    pos: int = 0
    outputs: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        """Tokens the request holds in the cache when it finishes (upper bound)."""
        return len(self.prompt) + self.max_new

    def fresh(self) -> Request:
        """The same request, not started."""
        return Request(self.rid, self.arrival, self.prompt, self.max_new)


def make_trace(num_requests: int, vocab: int, seed: int) -> list[Request]:
    """A two-phase trace: short chat turns (state-heavy: many requests, few tokens each),
    then long documents (KV-heavy), arriving a few per step.

    Args:
        num_requests: Requests in all (half per phase).
        vocab: Token ids are drawn from ``[0, vocab)``.
        seed: Trace seed.
    """
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    out, step = [], 0
    for i in range(num_requests):
        chat = i < num_requests // 2
        p = rng.randint(6, 40) if chat else rng.randint(80, 200)
        o = rng.randint(4, 24) if chat else rng.randint(4, 12)
        step += rng.choice((0, 0, 1)) if chat else rng.choice((0, 1, 2))
        out.append(Request(i, step, torch.randint(0, vocab, (p,), generator=gen), o))
    return out


class Budget:
    """Admission by worst-case bytes: one shared budget (a unified pool) or two fixed ones
    (a static split).

    Args:
        limits: ``(shared,)`` bytes, or ``(kv, other)`` bytes of a static split.
    """

    def __init__(self, *limits: int) -> None:
        self.limits = limits
        self.used = [0] * len(limits)

    def _cost(self, need: tuple[int, int]) -> list[int]:
        return [sum(need)] if len(self.limits) == 1 else list(need)

    def try_take(self, need: tuple[int, int]) -> bool:
        """Reserve ``need`` = (kv, other) bytes if they fit; whether they did."""
        cost = self._cost(need)
        if any(u + c > lim for u, c, lim in zip(self.used, cost, self.limits)):
            return False
        self.used = [u + c for u, c in zip(self.used, cost)]
        return True

    def give(self, need: tuple[int, int]) -> None:
        """Return a finished request's reservation."""
        self.used = [u - c for u, c in zip(self.used, self._cost(need))]


@dataclass
class ScheduleResult:
    """What one scheduled run did.

    Attributes:
        steps: Batches, each a list of (rid, tokens) in order.
        admitted: Request ids admitted at each step.
        finished: Request ids finished at each step.
        peak_running: Most requests running at once.
    """

    steps: list[list[tuple[int, int]]] = field(default_factory=list)
    admitted: list[list[int]] = field(default_factory=list)
    finished: list[list[int]] = field(default_factory=list)
    peak_running: int = 0


def schedule(
    trace: list[Request],
    budget: Budget,
    cost: Any,
    *,
    max_running: int,
    chunk: int,
    prefill_budget: int,
    on_step: Any = None,
) -> ScheduleResult:
    """Run the continuous-batching loop over ``trace``.

    Args:
        trace: Requests (progress is tracked on them; pass fresh copies).
        budget: Admission budget.
        cost: ``cost(num_tokens) -> (kv_bytes, other_bytes)`` of one request.
        max_running: Cap on concurrent requests.
        chunk: Longest prefill chunk per request and step.
        prefill_budget: Prefill tokens per step, all requests together.
        on_step: ``on_step(admitted, batch, finished_before)``: runs the model for the
            batch (admits first, releases the previous step's finished requests before);
            returns one logits row per batch entry whose prompt is done, or None
            (scheduling only: outputs are then placeholders).
    """
    pending = sorted(trace, key=lambda r: (r.arrival, r.rid))
    by_id = {r.rid: r for r in trace}
    waiting: list[Request] = []
    running: list[Request] = []
    res = ScheduleResult()
    done_last: list[int] = []
    step = 0
    while pending or waiting or running:
        while pending and pending[0].arrival <= step:
            waiting.append(pending.pop(0))
        admitted = []
        while (
            waiting and len(running) < max_running and budget.try_take(cost(waiting[0].num_tokens))
        ):
            running.append(waiting.pop(0))
            admitted.append(running[-1].rid)
        if waiting and not running:
            raise ValueError(
                f"request {waiting[0].rid} of {waiting[0].num_tokens} tokens needs "
                f"{cost(waiting[0].num_tokens)} bytes, more than the budget {budget.limits}"
            )
        res.peak_running = max(res.peak_running, len(running))
        batch, left = [], prefill_budget
        for r in running:
            if r.pos < len(r.prompt):
                n = min(chunk, len(r.prompt) - r.pos, left)
                left -= n
            else:
                n = 1
            if n:
                batch.append((r.rid, n))
        rows = on_step(admitted, batch, done_last) if on_step is not None else None
        done_last = _advance(batch, by_id, rows)
        for rid in done_last:
            running.remove(by_id[rid])
            budget.give(cost(by_id[rid].num_tokens))
        res.steps.append(batch)
        res.admitted.append(admitted)
        res.finished.append(done_last)
        step += 1
    if on_step is not None and done_last:
        on_step([], [], done_last)
    return res


def _advance(batch: list[tuple[int, int]], by_id: dict[int, Request], rows: Any) -> list[int]:
    """Move each request past its chunk; record the token its logits chose."""
    finished = []
    for i, (rid, n) in enumerate(batch):
        r = by_id[rid]
        r.pos += n
        if r.pos >= len(r.prompt):
            if rows is not None:
                r.logits.append(rows[i])
                r.outputs.append(int(rows[i].argmax()))
            else:
                r.outputs.append(0)
            if len(r.outputs) == r.max_new:
                finished.append(rid)
    return finished


def chunks_for(batch: list[tuple[int, int]], by_id: dict[int, Request]) -> list[Chunk]:
    """The model's input for a batch: prompt slices, or the last generated token."""
    out = []
    for rid, n in batch:
        r = by_id[rid]
        if r.pos < len(r.prompt):
            toks = r.prompt[r.pos : r.pos + n]
        else:
            toks = torch.tensor([r.outputs[-1]], dtype=torch.int64)
        out.append(Chunk(rid, r.pos, toks))
    return out


@dataclass
class PooledRun:
    """The pooled run's outcome: the requests (with outputs), the schedule, wall time,
    forward tokens, and per-step snapshots of the pool (``pool.stats()``)."""

    requests: list[Request]
    schedule: ScheduleResult
    seconds: float
    tokens: int
    snapshots: list[Any]


def run_pooled(
    model: HybridModel, cache: Any, trace: list[Request], budget: Budget, **sched: Any
) -> PooledRun:
    """Serve ``trace`` with the model reading and writing only through ``cache``'s pool."""
    reqs = [r.fresh() for r in trace]
    by_id = {r.rid: r for r in reqs}
    snaps: list[Any] = []
    tokens = 0

    def on_step(admitted: list[int], batch: list[tuple[int, int]], finished: list[int]) -> Any:
        nonlocal tokens
        for rid in finished:
            cache.release(rid)
        if cache.pool.lazy:
            cache.pool.flush()
        for rid in admitted:
            cache.admit(rid)
        if not batch:
            return None
        cache.prepare(batch)
        chunks = chunks_for(batch, by_id)
        rows = model.forward(chunks, cache).cpu()
        cache.after_step(chunks)
        tokens += sum(n for _, n in batch)
        snaps.append(cache.pool.stats())
        return rows

    t0 = time.perf_counter()
    res = schedule(reqs, budget, cache.request_bytes, on_step=on_step, **sched)
    if cache.pool.lazy:
        cache.pool.flush(urgent=True)
    cache.pool.check_invariants()
    return PooledRun(reqs, res, time.perf_counter() - t0, tokens, snaps)


def run_reference(
    model: HybridModel, cache: Any, trace: list[Request], steps: ScheduleResult
) -> list[Request]:
    """Replay the pooled run's batches with the reference cache; each request chooses its
    own tokens from its own logits."""
    reqs = [r.fresh() for r in trace]
    by_id = {r.rid: r for r in reqs}
    for admitted, batch, finished in zip(steps.admitted, steps.steps, steps.finished):
        for rid in admitted:
            cache.admit(rid)
        if batch:
            chunks = chunks_for(batch, by_id)
            rows = model.forward(chunks, cache).cpu()
            _advance(batch, by_id, rows)
        for rid in finished:
            cache.release(rid)
    return reqs

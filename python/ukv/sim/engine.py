"""The serving loop: a deterministic, step-by-step model of a continuous-batching engine.

Each step does what an SGLang-style scheduler does:

1. arrivals join the FCFS queue (with nothing running and nothing queued, time jumps to
   the next arrival);
2. decode: every running request past its prefill grows by one token; if the memory does
   not fit, the prefix cache evicts (if there is one), else the newest decoding requests
   are retracted (everything released, the request goes back to the head of the queue and
   later re-prefills its prompt plus the tokens it had generated) until it does;
3. requests that reached their output length complete and release their memory (with a
   prefix cache, their sequence is cached first);
4. chunked prefill, up to ``CHUNK`` tokens: running prefills continue first, then queued
   requests are admitted in order while the budget lasts. Admission reuses the longest
   cached prefix (prefix cache), needs the request's state slot (Mamba) and its first
   chunk, and keeps back, as SGLang's ``new_token_ratio`` does, ``ratio × remaining output
   tokens`` of every running request, counting what the cache could evict as free (SGLang's
   ``available + evictable``). The ratio starts at ``RATIO_INIT``, decays by
   ``RATIO_DECAY`` a step to ``RATIO_MIN``, and is reset to ``RATIO_INIT`` by a
   retraction. The queue head that does not fit blocks the queue; ``max_running`` caps the
   requests running at once (SGLang's ``max_running_requests``). The step in which a
   request's prefill completes yields its first output token.

The step then costs ``clock.step_time(...)`` of simulated time (:mod:`ukv.sim.clock`: a
fixed 25 ms, or a model measured on the GPU from what the step reads and computes).
Nothing is random here: the trace carries all of the randomness, so the same trace gives
the same result.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ukv.sim.backends import Backend, pages, window_pages
from ukv.sim.clock import Clock, FixedClock
from ukv.sim.prefix import RadixCache
from ukv.sim.traces import Trace

CHUNK = 8192
"""Prefill tokens per step (SGLang's default ``chunked_prefill_size``)."""
RATIO_INIT = 0.7
"""SGLang's initial ``new_token_ratio``."""
RATIO_MIN = 0.1
"""SGLang's ``min_new_token_ratio``."""
RATIO_DECAY = 0.001
"""SGLang's per-step ``new_token_ratio`` decay."""
SAMPLE_EVERY = 20
"""Steps between the byte samples of the timeline (the plot)."""
IDLE_STEP_S = 1e-3
"""Time a step that did no work at all costs (so that time always advances)."""


@dataclass
class Run:
    """What one simulation produced (raw; :mod:`ukv.sim.metrics` summarises it).

    Attributes:
        backend: The backend's name.
        steps: Steps simulated.
        makespan: Simulated seconds from the first arrival to the last completion.
        running: shape ``[steps]`` int32, requests holding memory after each step.
        times: shape ``[steps]`` float64, simulated time at the end of each step.
        durations: shape ``[steps]`` float64, simulated seconds each step took.
        timeline: rows ``(time s, full-side bytes, other-side bytes, running)``, every
            ``SAMPLE_EVERY`` steps.
        admitted_at, first_at, finished_at: shape ``[N]`` float64 seconds (NaN: never):
            first admission, first output token, completion.
        generated: Output tokens produced (re-generated ones after a retraction count once).
        retractions: Requests retracted.
        rejected: Requests dropped because they do not fit even alone.
        bytes_moved, bytes_freed: Compaction bytes moved, bytes released.
        wall_s: Host seconds the run took.
        prompt_tokens, hit_tokens: Prompt tokens of first admissions, and how many of them
            came from the prefix cache.
        prefill_tokens: Tokens prefilled (recomputation after a retraction included).
        cache: The prefix cache's counters (empty without one).
    """

    backend: str
    steps: int
    makespan: float
    running: np.ndarray
    times: np.ndarray
    durations: np.ndarray
    timeline: np.ndarray
    admitted_at: np.ndarray
    first_at: np.ndarray
    finished_at: np.ndarray
    generated: int
    retractions: int
    rejected: int
    bytes_moved: int
    bytes_freed: int
    wall_s: float
    total_bytes: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    prefill_tokens: int = 0
    cache: dict = field(default_factory=dict)
    clock: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


class _Progress:
    """A one-line stderr progress bar (only on a terminal, or when forced)."""

    def __init__(self, label: str, total: int, enabled: bool) -> None:
        self.label, self.total, self.enabled, self.last = label, max(total, 1), enabled, -1

    def update(self, done: int) -> None:
        pct = int(100 * done / self.total)
        if self.enabled and pct != self.last:
            self.last = pct
            bar = "#" * (pct // 5)
            sys.stderr.write(f"\r{self.label:<24} [{bar:<20}] {pct:3d}%")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def simulate(
    trace: Trace,
    backend: Backend,
    *,
    clock: Clock | None = None,
    cache: RadixCache | None = None,
    max_running: int | None = None,
    max_steps: int = 2_000_000,
    progress: bool = False,
) -> Run:
    """Serve ``trace`` from ``backend`` until every request completes.

    Args:
        trace: The requests.
        backend: The memory layout.
        clock: Seconds per step (default: the fixed 25 ms clock).
        cache: A prefix cache over ``backend`` (None: no prefix caching).
        max_running: Most requests running at once (None: no cap).
        max_steps: Stop after this many steps (a request that can never fit stalls the
            queue forever; the run then ends with it unfinished).
        progress: Draw a progress bar on stderr.

    Returns:
        Run: the raw results.
    """
    t0 = time.perf_counter()
    clk = clock if clock is not None else FixedClock()
    s = _State(trace, backend, cache, max_running)
    bar = _Progress(backend.name, len(trace), progress)
    running_hist: list[int] = []
    times: list[float] = []
    durs: list[float] = []
    timeline = []
    step = 0
    now = 0.0
    n = len(trace)
    on_time = getattr(backend, "on_time", None)
    while s.done < n and step < max_steps:
        if on_time is not None:
            on_time(now)
        s.arrive(now)
        if not s.run and not s.queue:
            if s.next_arrival >= n:
                break
            now = max(now, float(s.arrival[s.next_arrival]))
            continue
        s.begin_step()
        s.decode()
        s.prefill(now)
        if s.step_ctx or s.step_chunks:
            dt = clk.step_time(np.asarray(s.step_ctx, dtype=np.int64), s.step_chunks)
        else:
            dt = IDLE_STEP_S
        now += dt
        s.stamp(now)
        running_hist.append(len(s.run))
        times.append(now)
        durs.append(dt)
        if step % SAMPLE_EVERY == 0:
            full, other = backend.usage()
            timeline.append((now, full, other, len(s.run)))
        s.ratio = max(RATIO_MIN, s.ratio - RATIO_DECAY)
        step += 1
        if step % 200 == 0:
            bar.update(s.done)
    bar.update(s.done)
    bar.close()
    done = ~np.isnan(s.finished_at)
    end = float(np.nanmax(s.finished_at)) if done.any() else now
    start = float(trace.arrival[0]) if n else 0.0
    stats = {}
    if cache is not None:
        pages_held, ckpts = cache.held()
        stats = {
            "nodes": cache.nodes,
            "pages_held_end": pages_held,
            "ckpts_held_end": ckpts,
            "evicted_pages": cache.evicted_pages,
            "evicted_ckpts": cache.evicted_ckpts,
            "policy": cache.policy,
            "eviction": cache.eviction,
        }
    return Run(
        backend=backend.name,
        steps=step,
        makespan=max(end - start, 1e-9),
        running=np.asarray(running_hist, dtype=np.int32),
        times=np.asarray(times, dtype=np.float64),
        durations=np.asarray(durs, dtype=np.float64),
        timeline=np.asarray(timeline, dtype=np.float64).reshape(-1, 4),
        admitted_at=s.admitted_at,
        first_at=s.first_at,
        finished_at=s.finished_at,
        generated=int(s.generated.sum()),
        retractions=s.retractions,
        rejected=int(s.rejected.sum()),
        bytes_moved=backend.bytes_moved(),
        bytes_freed=backend.bytes_freed,
        wall_s=time.perf_counter() - t0,
        total_bytes=backend.total_bytes,
        prompt_tokens=s.prompt_tokens,
        hit_tokens=s.hit_tokens,
        prefill_tokens=s.prefill_tokens,
        cache=stats,
        clock=clk.describe(),
    )


_NEVER = np.iinfo(np.int64).max


class _State:
    """Per-request numpy bookkeeping of one run.

    Per request: ``tree`` pages of its tokens the prefix cache holds (locked at ``node``),
    ``held`` tokens it holds itself beyond them, ``computed`` tokens prefilled (cached
    ones included) out of ``target``.
    """

    def __init__(
        self, trace: Trace, backend: Backend, cache: RadixCache | None, max_running: int | None
    ) -> None:
        n = len(trace)
        self.b, self.cache, self.cap = backend, cache, max_running
        self.G = cache.G if cache is not None else 1
        self.arrival = trace.arrival
        self.prompt = trace.prompt_len.astype(np.int64)
        self.output = trace.output_len.astype(np.int64)
        self.target = self.prompt.copy()  # tokens to prefill (prompt + regenerated)
        self.computed = np.zeros(n, np.int64)  # tokens prefilled so far (cached included)
        self.held = np.zeros(n, np.int64)  # tokens held by the request itself
        self.tree = np.zeros(n, np.int64)  # pages of its prefix the cache holds
        self.node: dict[int, object] = {}
        self.branch = np.zeros(n, np.int64)  # Marconi: a branch point to checkpoint
        self.generated = np.zeros(n, np.int64)
        self.admitted_at = np.full(n, np.nan)
        self.first_at = np.full(n, np.nan)
        self.finished_at = np.full(n, np.nan)
        self.rejected = np.zeros(n, dtype=bool)
        self.seen = np.zeros(n, dtype=bool)
        self.queue: list[int] = []
        self.next_arrival = 0
        self.run: list[int] = []  # admission order
        self.done = 0
        self.retractions = 0
        self.ratio = RATIO_INIT
        self.prompt_tokens = 0
        self.hit_tokens = 0
        self.prefill_tokens = 0
        self.policy = cache.policy if cache is not None else "none"
        self.ckpt = None
        if cache is not None and cache.needs_ckpt:
            self.ckpt = "window" if getattr(backend, "kind", "") == "swa" else "copy"
        # SWA: the window checkpoints a running request still attends to (its live window)
        # stay locked until the window has slid past them (see ``_hold``).
        self.win = int(backend.window) if self.ckpt == "window" else 0
        self.Pw = int(getattr(backend, "B_other", self.G))  # tokens per SWA page
        self.wpages = window_pages(self.win, self.Pw) if self.win else 0
        self.wl: dict[int, list] = {}
        self.wl_until = np.full(n, _NEVER, np.int64)
        self.begin_step()

    # -- step accounting --

    def begin_step(self) -> None:
        self.step_ctx: list[int] = []
        self.step_chunks: list[tuple[int, int]] = []
        self.step_first: list[int] = []
        self.step_fin: list[int] = []
        self.pending_fin: list[int] = []

    def stamp(self, now: float) -> None:
        if self.step_first:
            self.first_at[self.step_first] = now
        if self.step_fin:
            self.finished_at[self.step_fin] = now

    def arrive(self, now: float) -> None:
        j = int(np.searchsorted(self.arrival, now, side="right"))
        if j > self.next_arrival:
            self.queue.extend(range(self.next_arrival, j))
            self.next_arrival = j

    # -- memory with eviction --

    def _evict(self, default: str) -> bool:
        """Evict one item; ``default`` is what the failed allocation lacked where the
        layout cannot tell (one pool: a grow lacks KV room, an admission a state)."""
        c = self.cache
        if c is None:
            return False
        kind = self.b.short if self.b.short in ("full", "ckpt") else default
        return c.evict(kind if c.eviction == "split" else "any")

    def _grow(self, rids: np.ndarray, old: np.ndarray, new: np.ndarray) -> bool:
        while True:
            if self.b.grow(rids, old, new):
                return True
            if not self._evict("full"):
                return False

    def _admit_state(self, r: int) -> bool:
        while True:
            if self.b.admit(r):
                return True
            if not self._evict("ckpt"):
                return False

    def _ev(self) -> tuple[int, int]:
        c = self.cache
        return (c.ev_pages, c.ev_ckpt) if c is not None else (0, 0)

    # -- the prefix cache's side of a request --

    def _insert(self, r: int, upto: int, ckpt: str | None) -> None:
        """Cache ``r``'s pages ``[0, upto)`` and move its lock to the node there."""
        c = self.cache
        assert c is not None
        if upto <= self.tree[r] and ckpt is None:
            return
        upto = max(upto, int(self.tree[r]))
        node, taken = c.insert(r, upto, int(self.tree[r]), int(self.held[r]), ckpt)
        self.held[r] -= taken
        self.tree[r] = upto
        old = self.node.get(r)
        if node is not old:
            self._lock(r, node)
            c.unlock(old, ckpt=not self.win)  # type: ignore[arg-type]
            self.node[r] = node

    def _lock(self, r: int, node: object) -> None:
        """Lock ``node``'s path for ``r``, and its checkpoint. SWA: a window checkpoint
        holds pages of ``r``'s live window, so its lock is kept (in ``wl``) past the path
        lock moving on, while ``r``'s window still covers any of it (``_slide``): a
        window in use is never evictable, and a cache never frees memory the request
        still holds (with caching off the same pages are simply held by the request)."""
        c = self.cache
        assert c is not None
        c.lock(node, ckpt=not self.win)  # type: ignore[arg-type]
        if self.win and c.lock_ckpt(node):  # type: ignore[arg-type]
            self.wl.setdefault(r, []).append(node)
            self.wl_until[r] = 0  # look at it at the next step

    def _slide(self, r: int, ctx: int) -> None:
        """``r`` holds ``ctx`` tokens: the pages of its window checkpoints that left its
        window (the ``swa_pages`` it would hold with caching off) become evictable cache
        (:meth:`RadixCache.trim`); a checkpoint wholly out of it is unlocked."""
        held = self.wl.get(r)
        c = self.cache
        assert c is not None
        low = int(pages(ctx, self.Pw)) - self.wpages  # the first SWA page still in use
        while held and int(held[0].end) * self.G // self.Pw <= low:
            c.unlock_ckpt(held.pop(0), slid=True)
        for x in held or ():
            if x.ckpt is None or x.ckpt_lock != 1 or x.broken:
                continue  # shared with another request: kept whole
            end = int(x.end) * self.G // self.Pw
            units = int(c.backend.ckpt_units(x.ckpt))
            if end - units >= low:
                break
            c.trim(x, low - (end - units))
        self.wl_until[r] = int(pages(ctx, self.Pw)) * self.Pw + 1 if held else _NEVER

    def _unlock_all(self, r: int, node: object) -> None:
        """Drop ``r``'s lock on ``node`` and every window lock it holds."""
        c = self.cache
        assert c is not None
        c.unlock(node, ckpt=not self.win)  # type: ignore[arg-type]
        for x in self.wl.pop(r, ()):
            c.unlock_ckpt(x)
        self.wl_until[r] = _NEVER

    def _release(self, r: int) -> None:
        """Give back everything ``r`` holds itself, and its lock on the cache."""
        self.b.release(np.array([r]), self.held[[r]])
        self.held[r] = 0
        if self.cache is not None:
            self._unlock_all(r, self.node.pop(r, None))
        self.tree[r] = 0

    def _finish_cache(self, r: int) -> None:
        """Cache a finished request's sequence (SGLang's ``cache_finished_req``)."""
        c = self.cache
        if c is None:
            return
        total = int(self.tree[r]) * self.G + int(self.held[r])
        upto = total // self.G
        if self.policy == "vllm":
            ck = "donate" if self.ckpt == "copy" and total % self.G == 0 else None
            if self.ckpt == "window":
                ck = "window"
        elif self.ckpt == "copy":
            ck = "donate"
        else:
            ck = self.ckpt
        self._insert(r, upto, ck)

    def _after_chunk(self, r: int) -> None:
        """Cache what a prefill chunk computed, as the policy says."""
        c = self.cache
        if c is None:
            return
        done = int(self.computed[r])
        if self.policy in ("sglang", "none"):
            self._insert(r, done // self.G, self.ckpt)
        elif self.policy == "vllm":
            if done // self.G > self.tree[r]:
                self._insert(r, done // self.G, self.ckpt)
        elif self.policy == "marconi":
            b = int(self.branch[r])
            if b and done // self.G >= b > self.tree[r]:
                self._insert(r, b, self.ckpt)
                self.branch[r] = 0

    # -- the step --

    def decode(self) -> None:
        if not self.run:
            return
        run = np.asarray(self.run, dtype=np.int64)
        dec = run[(self.computed[run] >= self.target[run]) & (self.generated[run] >= 1)]
        while dec.size:
            old = self.held[dec]
            if self._grow(dec, old, old + 1):
                break
            dec = self._retract(dec)
        if dec.size == 0:
            return
        self.held[dec] += 1
        self.generated[dec] += 1
        ctx = self.tree[dec] * self.G + self.held[dec]
        self.step_ctx.extend(ctx.tolist())
        if self.win:
            slid = ctx >= self.wl_until[dec]
            for r, x in zip(dec[slid].tolist(), ctx[slid].tolist()):
                self._slide(r, x)
        if self.cache is not None and self.policy == "vllm":
            cross = dec[(ctx % self.G == 0) & (self.generated[dec] < self.output[dec])]
            for r in cross.tolist():
                self._insert(r, int(self.tree[r] * self.G + self.held[r]) // self.G, self.ckpt)
        fin = dec[self.generated[dec] >= self.output[dec]]
        if fin.size:
            self._complete(fin)

    def _complete(self, fin: np.ndarray) -> None:
        for r in fin.tolist():
            self._finish_cache(r)
            self._release(r)
        self.step_fin.extend(fin.tolist())
        self.done += int(fin.size)
        gone = set(fin.tolist())
        self.run = [r for r in self.run if r not in gone]

    def _retract(self, dec: np.ndarray) -> np.ndarray:
        """Retract the newest decoding request; return the rest."""
        victim = int(dec[-1])
        self._release(victim)
        self.computed[victim] = 0
        self.target[victim] = self.prompt[victim] + self.generated[victim]
        self.run.remove(victim)
        self.queue.insert(0, victim)
        self.retractions += 1
        self.ratio = RATIO_INIT
        return dec[:-1]

    def _unstick(self, r: int) -> None:
        """A prefill chunk did not fit: wait for decodes to free memory, or, with none
        decoding (nothing will ever be freed), retract this request."""
        run = np.asarray(self.run, dtype=np.int64)
        if ((self.computed[run] >= self.target[run]) & (self.generated[run] >= 1)).any():
            return
        self._release(r)
        self.computed[r] = 0
        self.run.remove(r)
        self.queue.insert(0, r)
        self.retractions += 1
        self.ratio = RATIO_INIT

    def _reserve(self) -> int:
        if not self.run:
            return 0
        run = np.asarray(self.run, dtype=np.int64)
        out = self.output[run] - self.generated[run]
        return int((self.target[run] - self.computed[run]).sum()) + int(
            self.ratio * float(out.sum())
        )

    def prefill(self, now: float) -> None:
        self._prefill(now)
        if self.pending_fin:  # requests whose only output token came from the prefill
            fin = np.asarray(self.pending_fin, dtype=np.int64)
            self.pending_fin = []
            self._complete(fin)

    def _prefill(self, now: float) -> None:
        budget = CHUNK
        pending: list[int] = []
        if self.run:  # the running requests still prefilling, in admission order
            run = np.asarray(self.run, dtype=np.int64)
            pending = run[self.target[run] > self.computed[run]].tolist()
        for r in pending:
            if budget == 0:
                return
            left = int(self.target[r] - self.computed[r])
            got = self._chunk(r, min(left, budget))
            if got == 0:
                self._unstick(r)
                return
            budget -= got
            if self.computed[r] < self.target[r]:
                return  # still prefilling: it keeps the rest of the budget next step
        reserve = self._reserve()
        while budget > 0 and self.queue:
            if self.cap is not None and len(self.run) >= self.cap:
                return
            r = self.queue[0]
            if not self.b.fits_alone(int(self.target[r] + self.output[r] - self.generated[r])):
                self._reject(r)
                continue
            node, hit_pages, branch = None, 0, 0
            if self.cache is not None:
                node, hit_pages, branch = self.cache.match(r, int(self.target[r]) - 1)
                self._lock(r, node)
            hit = hit_pages * self.G
            need = int(self.target[r]) - hit
            first = min(need, budget)
            # The whole prompt is kept back (a chunked prefill must be able to finish),
            # and ratio × the output, as SGLang's PrefillAdder does.
            want = need + int(self.ratio * float(self.output[r] - self.generated[r]))
            ev_pages, ev_ckpt = self._ev()
            if not self.b.fits(1, reserve + want, ev_pages, ev_ckpt) or not self._admit_state(r):
                if self.cache is not None:
                    self._unlock_all(r, node)
                self._reject_if_alone(r)
                return
            self.tree[r] = hit_pages
            self.computed[r] = hit
            self.held[r] = 0
            if node is not None:
                self.node[r] = node
            if self.policy == "marconi" and self.ckpt == "copy" and branch > hit_pages:
                self.branch[r] = branch
            if self._chunk(r, first) == 0:
                self._release(r)
                self.computed[r] = 0
                self._reject_if_alone(r)
                return
            self.queue.pop(0)
            self.run.append(r)
            if not self.seen[r]:
                self.seen[r] = True
                self.admitted_at[r] = now
                self.prompt_tokens += int(self.prompt[r])
                self.hit_tokens += min(hit, int(self.prompt[r]))
            budget -= first
            reserve += want

    def _reject(self, r: int) -> None:
        """Drop the queue head: it would not fit even alone (an engine's context check)."""
        self.queue.pop(0)
        self.rejected[r] = True
        self.finished_at[r] = np.nan
        self.done += 1

    def _reject_if_alone(self, r: int) -> None:
        """With nothing running, a head that cannot start never will: reject it."""
        if not self.run:
            self._reject(r)

    def _chunk(self, r: int, n: int) -> int:
        """Prefill ``n`` tokens of ``r``; 0 when they do not fit."""
        rid = np.array([r], dtype=np.int64)
        old = self.held[rid]
        if not self._grow(rid, old, old + n):
            return 0
        start = int(self.computed[r])
        self.held[r] += n
        self.computed[r] += n
        self.prefill_tokens += n
        self.step_chunks.append((start, n))
        self._after_chunk(r)
        if self.win:
            ctx = int(self.tree[r]) * self.G + int(self.held[r])
            if ctx >= self.wl_until[r]:
                self._slide(r, ctx)
        if self.computed[r] >= self.target[r] and self.generated[r] == 0:
            self.generated[r] = 1  # the prefill's last position yields the first token
            self.step_first.append(r)
            if self.output[r] <= 1:
                self.pending_fin.append(r)
        return n

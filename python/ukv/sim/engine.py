"""The serving loop: a deterministic, step-by-step model of a continuous-batching engine.

Each step (``STEP_S`` of simulated time) does what an SGLang-style scheduler does:

1. arrivals join the FCFS queue;
2. decode: every running request past its prefill grows by one token; if the memory
   does not fit, the newest decoding requests are retracted (everything released, the
   request goes back to the head of the queue and later re-prefills its prompt plus the
   tokens it had generated) until it does;
3. requests that reached their output length complete and release their memory;
4. chunked prefill, up to ``CHUNK`` tokens: running prefills continue first, then queued
   requests are admitted in order while the budget lasts. Admission needs the request's
   state slot (Mamba) and its first chunk, and keeps back, as SGLang's ``new_token_ratio``
   does, ``ratio × remaining output tokens`` of every running request. The ratio starts
   at ``RATIO_INIT``, decays by ``RATIO_DECAY`` a step to ``RATIO_MIN``, and is reset
   to ``RATIO_INIT`` by a retraction. The queue head that does not fit blocks the queue.

Every step costs the same simulated time whatever the batch (a pure capacity model: more
requests in memory is more throughput). Nothing is random here: the trace carries all of
the randomness, so the same trace gives the same result.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ukv.sim.backends import Backend
from ukv.sim.traces import Trace

STEP_S = 0.025
"""Simulated seconds per scheduler step (one decode iteration of a large batch)."""
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


@dataclass
class Run:
    """What one simulation produced (raw; :mod:`ukv.sim.metrics` summarises it).

    Attributes:
        backend: The backend's name.
        steps: Steps simulated.
        running: shape ``[steps]`` int32, requests holding memory after each step.
        timeline: rows ``(time s, full-side bytes, other-side bytes, running)``, every
            ``SAMPLE_EVERY`` steps.
        admitted_at, finished_at: shape ``[N]`` float64 seconds (NaN: never).
        generated: Output tokens produced (re-generated ones after a retraction count once).
        retractions: Requests retracted.
        rejected: Requests dropped because they do not fit even alone.
        bytes_moved, bytes_freed: Compaction bytes moved, bytes released.
        wall_s: Host seconds the run took.
    """

    backend: str
    steps: int
    running: np.ndarray
    timeline: np.ndarray
    admitted_at: np.ndarray
    finished_at: np.ndarray
    generated: int
    retractions: int
    rejected: int
    bytes_moved: int
    bytes_freed: int
    wall_s: float
    total_bytes: int = 0
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
    trace: Trace, backend: Backend, *, max_steps: int = 2_000_000, progress: bool = False
) -> Run:
    """Serve ``trace`` from ``backend`` until every request completes.

    Args:
        trace: The requests.
        backend: The memory layout.
        max_steps: Stop after this many steps (a request that can never fit stalls the
            queue forever; the run then ends with it unfinished).
        progress: Draw a progress bar on stderr.

    Returns:
        Run: the raw results.
    """
    t0 = time.perf_counter()
    s = _State(trace)
    bar = _Progress(backend.name, len(trace), progress)
    running_hist = []
    timeline = []
    step = 0
    while s.done < len(trace) and step < max_steps:
        now = step * STEP_S
        s.arrive(now)
        s.decode(backend, now)
        s.prefill(backend, now)
        running_hist.append(len(s.run))
        if step % SAMPLE_EVERY == 0:
            full, other = backend.usage()
            timeline.append((now, full, other, len(s.run)))
        s.ratio = max(RATIO_MIN, s.ratio - RATIO_DECAY)
        step += 1
        if step % 200 == 0:
            bar.update(s.done)
    bar.update(s.done)
    bar.close()
    return Run(
        backend=backend.name,
        steps=step,
        running=np.asarray(running_hist, dtype=np.int32),
        timeline=np.asarray(timeline, dtype=np.float64).reshape(-1, 4),
        admitted_at=s.admitted_at,
        finished_at=s.finished_at,
        generated=int(s.generated.sum()),
        retractions=s.retractions,
        rejected=int(s.rejected.sum()),
        bytes_moved=backend.bytes_moved(),
        bytes_freed=backend.bytes_freed,
        wall_s=time.perf_counter() - t0,
        total_bytes=backend.total_bytes,
    )


class _State:
    """Per-request numpy bookkeeping of one run."""

    def __init__(self, trace: Trace) -> None:
        n = len(trace)
        self.arrival = trace.arrival
        self.prompt = trace.prompt_len.astype(np.int64)
        self.output = trace.output_len.astype(np.int64)
        self.target = self.prompt.copy()  # tokens to prefill (prompt + regenerated)
        self.computed = np.zeros(n, np.int64)  # tokens prefilled so far
        self.held = np.zeros(n, np.int64)  # tokens held in memory
        self.generated = np.zeros(n, np.int64)
        self.admitted_at = np.full(n, np.nan)
        self.finished_at = np.full(n, np.nan)
        self.rejected = np.zeros(n, dtype=bool)
        self.queue: list[int] = []
        self.next_arrival = 0
        self.run: list[int] = []  # admission order
        self.done = 0
        self.retractions = 0
        self.ratio = RATIO_INIT

    def arrive(self, now: float) -> None:
        j = int(np.searchsorted(self.arrival, now, side="right"))
        if j > self.next_arrival:
            self.queue.extend(range(self.next_arrival, j))
            self.next_arrival = j

    def decode(self, backend: Backend, now: float) -> None:
        if not self.run:
            return
        run = np.asarray(self.run, dtype=np.int64)
        dec = run[self.computed[run] >= self.target[run]]
        while dec.size:
            old = self.held[dec]
            if backend.grow(dec, old, old + 1):
                break
            dec = self._retract(backend, dec)
        if dec.size == 0:
            return
        self.held[dec] += 1
        self.generated[dec] += 1
        fin = dec[self.generated[dec] >= self.output[dec]]
        if fin.size:
            backend.release(fin, self.held[fin])
            self.held[fin] = 0
            self.finished_at[fin] = now
            self.done += int(fin.size)
            gone = set(fin.tolist())
            self.run = [r for r in self.run if r not in gone]

    def _retract(self, backend: Backend, dec: np.ndarray) -> np.ndarray:
        """Retract the newest decoding request; return the rest."""
        victim = int(dec[-1])
        backend.release(dec[-1:], self.held[dec[-1:]])
        self.held[victim] = 0
        self.computed[victim] = 0
        self.target[victim] = self.prompt[victim] + self.generated[victim]
        self.run.remove(victim)
        self.queue.insert(0, victim)
        self.retractions += 1
        self.ratio = RATIO_INIT
        return dec[:-1]

    def _unstick(self, backend: Backend, r: int) -> None:
        """A prefill chunk did not fit: wait for decodes to free memory, or, with none
        decoding (nothing will ever be freed), retract this request."""
        run = np.asarray(self.run, dtype=np.int64)
        if (self.computed[run] >= self.target[run]).any():
            return
        backend.release(np.array([r]), self.held[[r]])
        self.held[r] = 0
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

    def prefill(self, backend: Backend, now: float) -> None:
        budget = CHUNK
        for r in self.run:
            if budget == 0:
                return
            left = int(self.target[r] - self.computed[r])
            if left > 0:
                got = self._chunk(backend, r, min(left, budget))
                if got == 0:
                    self._unstick(backend, r)
                    return
                budget -= got
                if self.computed[r] < self.target[r]:
                    return  # still prefilling: it keeps the rest of the budget next step
        reserve = self._reserve()
        while budget > 0 and self.queue:
            r = self.queue[0]
            if not backend.fits_alone(int(self.target[r] + self.output[r] - self.generated[r])):
                self._reject(r, now)
                continue
            first = min(int(self.target[r]), budget)
            # The whole prompt is kept back (a chunked prefill must be able to finish),
            # and ratio × the output, as SGLang's PrefillAdder does.
            want = int(self.target[r]) + int(self.ratio * float(self.output[r] - self.generated[r]))
            if not backend.fits(1, reserve + want) or not backend.admit(r):
                self._reject_if_alone(r, now)
                return
            if self._chunk(backend, r, first) == 0:
                backend.release(np.array([r]), np.zeros(1, np.int64))
                self._reject_if_alone(r, now)
                return
            self.queue.pop(0)
            self.run.append(r)
            if np.isnan(self.admitted_at[r]):
                self.admitted_at[r] = now
            budget -= first
            reserve += want

    def _reject(self, r: int, now: float) -> None:
        """Drop the queue head: it would not fit even alone (an engine's context check)."""
        self.queue.pop(0)
        self.rejected[r] = True
        self.finished_at[r] = np.nan
        self.done += 1

    def _reject_if_alone(self, r: int, now: float) -> None:
        """With nothing running, a head that cannot start never will: reject it."""
        if not self.run:
            self._reject(r, now)

    def _chunk(self, backend: Backend, r: int, n: int) -> int:
        """Prefill ``n`` tokens of ``r``; 0 when they do not fit."""
        rid = np.array([r], dtype=np.int64)
        old = self.held[rid]
        if not backend.grow(rid, old, old + n):
            return 0
        self.held[r] += n
        self.computed[r] += n
        return n

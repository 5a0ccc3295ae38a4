"""Request traces: arrivals with prompt and output lengths, generated or loaded.

A trace is three aligned arrays sorted by arrival. The generators are seeded and
deterministic (numpy ``default_rng``), so the same seed gives the same trace on every
machine. Their default rates overload every preset at 40 GiB: a capacity study wants the
queue non-empty, so that what is served is bounded by memory, not by arrivals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ukv.errors import ArgumentError

CHAT_PROMPT = (1024, 4096)
"""Chat prompt lengths, tokens (log-uniform)."""
CHAT_OUTPUT = (128, 1024)
"""Chat output lengths, tokens (log-uniform)."""
LONG_PROMPT = (32 * 1024, 128 * 1024)
"""Long-document prompt lengths, tokens (log-uniform)."""
LONG_OUTPUT = (256, 2048)
"""Long-document output lengths, tokens (log-uniform)."""
CHAT_RATE = 200.0
"""Default chat arrivals per simulated second (Poisson)."""
LONG_RATE = 8.0
"""Default long-document arrivals per simulated second (Poisson)."""
PHASES = 4
"""Phases of a phase-shift trace (chat, long, chat, long)."""
BUILTIN = ("chat", "long", "phase")


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival.

    Attributes:
        name: What the trace is (``chat``, ``long``, ``phase``, or a file name).
        arrival: shape ``[N]`` float64, seconds of simulated time, non-decreasing.
        prompt_len: shape ``[N]`` int64, tokens (``>= 1``).
        output_len: shape ``[N]`` int64, tokens to generate (``>= 1``).
    """

    name: str
    arrival: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return int(self.arrival.size)

    def to_jsonl(self, path: str | Path) -> None:
        """Write one ``{"arrival", "prompt_len", "output_len"}`` object a line."""
        with open(path, "w") as f:
            for a, p, o in zip(self.arrival, self.prompt_len, self.output_len):
                f.write(
                    json.dumps({"arrival": float(a), "prompt_len": int(p), "output_len": int(o)})
                )
                f.write("\n")


def _loguniform(rng: np.random.Generator, lo_hi: tuple[int, int], n: int) -> np.ndarray:
    lo, hi = lo_hi
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n)).round().astype(np.int64)


def _poisson_arrivals(rng: np.random.Generator, rate: float, n: int, start: float) -> np.ndarray:
    return start + np.cumsum(rng.exponential(1.0 / rate, n))


def chat(n: int, seed: int = 0, rate: float = CHAT_RATE) -> Trace:
    """Chat: 1–4K-token prompts, 128–1024-token outputs, Poisson arrivals at ``rate``/s."""
    _check_n(n)
    rng = np.random.default_rng([seed, 1])
    arr = _poisson_arrivals(rng, rate, n, 0.0)
    return Trace("chat", arr, _loguniform(rng, CHAT_PROMPT, n), _loguniform(rng, CHAT_OUTPUT, n))


def long(n: int, seed: int = 0, rate: float = LONG_RATE) -> Trace:
    """Long documents: 32–128K-token prompts, 256–2048-token outputs, ``rate``/s."""
    _check_n(n)
    rng = np.random.default_rng([seed, 2])
    arr = _poisson_arrivals(rng, rate, n, 0.0)
    return Trace("long", arr, _loguniform(rng, LONG_PROMPT, n), _loguniform(rng, LONG_OUTPUT, n))


def phase(n: int, seed: int = 0, phases: int = PHASES) -> Trace:
    """Phase shifts: ``phases`` back-to-back phases alternating chat and long documents.

    Each phase lasts the same simulated time; a chat phase brings ``CHAT_RATE / LONG_RATE``
    times as many requests as a long phase, so the token mix swings from mostly short to
    mostly long and back. ``n`` is the total request count.
    """
    _check_n(n)
    if phases < 2:
        raise ArgumentError(f"bad argument phases = {phases!r}: need at least 2")
    rng = np.random.default_rng([seed, 3])
    kinds = [i % 2 for i in range(phases)]  # 0 chat, 1 long
    weights = np.array([CHAT_RATE if k == 0 else LONG_RATE for k in kinds])
    counts = np.floor(n * weights / weights.sum()).astype(int)
    counts[0] += n - counts.sum()
    duration = counts[0] / CHAT_RATE
    parts = []
    for i, (k, c) in enumerate(zip(kinds, counts)):
        c = int(max(c, 1))
        arr = i * duration + np.sort(rng.uniform(0.0, duration, c))
        pl = _loguniform(rng, LONG_PROMPT if k else CHAT_PROMPT, c)
        ol = _loguniform(rng, LONG_OUTPUT if k else CHAT_OUTPUT, c)
        parts.append((arr, pl, ol))
    arr, pl, ol = (np.concatenate(x) for x in zip(*parts))
    return Trace("phase", arr[:n], pl[:n], ol[:n])


def load_jsonl(path: str | Path) -> Trace:
    """Read a trace: one JSON object a line with ``arrival`` (seconds), ``prompt_len`` and
    ``output_len`` (positive ints); blank lines are skipped; sorted by arrival (stable).

    Raises:
        ArgumentError: a missing file, a bad line (named with its number), or no requests.
    """
    p = Path(path)
    if not p.is_file():
        raise ArgumentError(f"bad trace path {str(path)!r}: no such file")
    rows = []
    for lineno, line in enumerate(p.read_text().splitlines(), 1):
        if line.strip():
            rows.append(_row(line, lineno, p))
    if not rows:
        raise ArgumentError(f"bad trace {str(path)!r}: no requests")
    a, pl, ol = (np.array(x) for x in zip(*rows))
    order = np.argsort(a, kind="stable")
    return Trace(
        p.stem, a[order].astype(np.float64), pl[order].astype(np.int64), ol[order].astype(np.int64)
    )


def _row(line: str, lineno: int, path: Path) -> tuple[float, int, int]:
    try:
        obj = json.loads(line)
        a, pl, ol = obj["arrival"], obj["prompt_len"], obj["output_len"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ArgumentError(
            f"bad trace line {lineno} of {str(path)!r}: {line[:80]!r} ({e})"
        ) from None
    ok = isinstance(a, int | float) and not isinstance(a, bool) and a >= 0
    for v in (pl, ol):
        ok = ok and isinstance(v, int) and not isinstance(v, bool) and v >= 1
    if not ok:
        raise ArgumentError(
            f"bad trace line {lineno} of {str(path)!r}: {line[:80]!r} (arrival must be >= 0, "
            "prompt_len and output_len positive ints)"
        )
    return float(a), int(pl), int(ol)


def make(spec: str, n: int, seed: int = 0) -> Trace:
    """A built-in trace by name (``chat``, ``long``, ``phase``) or a JSONL file path."""
    if spec == "chat":
        return chat(n, seed)
    if spec == "long":
        return long(n, seed)
    if spec == "phase":
        return phase(n, seed)
    if spec.endswith(".jsonl") or Path(spec).is_file():
        return load_jsonl(spec)
    raise ArgumentError(f"bad trace {spec!r}: expected one of {BUILTIN} or a .jsonl file")


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ArgumentError(f"bad argument n = {n!r}: must be a positive int")

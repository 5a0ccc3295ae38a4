"""Request traces: arrivals with prompt and output lengths, generated or loaded.

A trace is three aligned arrays sorted by arrival. The generators are seeded and
deterministic (numpy ``default_rng``), so the same seed gives the same trace on every
machine. Their default rates overload every preset at 40 GiB: a capacity study wants the
queue non-empty, so that what is served is bounded by memory, not by arrivals.

Files (:func:`load`, format told by its content):

* ukv JSONL: ``{"arrival": s, "prompt_len": n, "output_len": n}`` a line;
* Mooncake JSONL (kvcache-ai/Mooncake ``FAST25-release/traces``): ``{"timestamp": ms,
  "input_length": n, "output_length": n, "hash_ids": [...]}`` a line; the ``hash_ids``
  (shared 512-token prompt blocks) are kept: they drive the prefix cache
  (:mod:`ukv.sim.prefix`);
* Azure LLM inference CSV (Azure/AzurePublicDataset, 2023): a ``TIMESTAMP,ContextTokens,
  GeneratedTokens`` header, then wall-clock timestamps (``2023-11-16 18:15:46.6805900``).

Arrivals become seconds from the first request; :func:`rescale` then compresses or
stretches them (``rate_scale`` times the recorded rate, or a target rate in requests per
second), keeping the recorded spacing's shape.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
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
PHASE_S = 120.0
"""Seconds each phase of :func:`phase_timed` lasts."""
BUILTIN = ("chat", "long", "phase")
DEFAULT_REQUESTS = 2000
"""Requests of a generated trace when none is asked for."""


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival.

    Attributes:
        name: What the trace is (``chat``, ``long``, ``phase``, or a file name).
        arrival: shape ``[N]`` float64, seconds of simulated time, non-decreasing.
        prompt_len: shape ``[N]`` int64, tokens (``>= 1``).
        output_len: shape ``[N]`` int64, tokens to generate (``>= 1``).
        origin: Where it came from and how it was scaled (one line; empty for a
            generated trace).
        hash_ids: Per request, the ids of its 512-token prompt blocks (Mooncake); None
            when the trace says nothing about shared prefixes.
    """

    name: str
    arrival: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    origin: str = ""
    hash_ids: tuple | None = None

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


def phase_timed(
    seed: int = 0,
    phases: int = PHASES,
    duration: float = PHASE_S,
    chat_rate: float = 4.0,
    long_rate: float = 0.2,
) -> Trace:
    """Phase shifts that last: ``phases`` phases of ``duration`` seconds each, alternating
    chat (Poisson at ``chat_rate``/s) and long documents (``long_rate``/s), each phase's
    arrivals inside its own time span (unlike :func:`phase`, whose requests all arrive at
    once as one backlog). ``name`` says the rates; ``phase_starts`` are the boundaries."""
    if phases < 2:
        raise ArgumentError(f"bad argument phases = {phases!r}: need at least 2")
    _positive(duration, "duration")
    _positive(chat_rate, "chat_rate")
    _positive(long_rate, "long_rate")
    rng = np.random.default_rng([seed, 4])
    parts = []
    for i in range(phases):
        is_long = i % 2 == 1
        rate = long_rate if is_long else chat_rate
        t0 = i * duration
        gaps = rng.exponential(1.0 / rate, int(rate * duration * 2) + 16)
        arr = t0 + np.cumsum(gaps)
        arr = arr[arr < t0 + duration]
        c = int(arr.size)
        pl = _loguniform(rng, LONG_PROMPT if is_long else CHAT_PROMPT, c)
        ol = _loguniform(rng, LONG_OUTPUT if is_long else CHAT_OUTPUT, c)
        parts.append((arr, pl, ol))
    arr, pl, ol = (np.concatenate(x) for x in zip(*parts))
    if arr.size == 0:
        raise ArgumentError("phase_timed: no request arrived; raise the rates or the duration")
    origin = (
        f"{phases} phases of {duration:g} s, chat {chat_rate:g}/s and long {long_rate:g}/s, "
        f"{arr.size:,} requests"
    )
    return Trace("phase", arr, pl, ol, origin)


def phase_starts(phases: int = PHASES, duration: float = PHASE_S) -> list[float]:
    """Start times of :func:`phase_timed`'s phases (the per-phase oracle's boundaries)."""
    return [i * duration for i in range(phases)]


def load_jsonl(path: str | Path) -> Trace:
    """Read a ukv JSONL trace: one JSON object a line with ``arrival`` (seconds),
    ``prompt_len`` and ``output_len`` (positive ints); blank lines are skipped; sorted by
    arrival (stable).

    Raises:
        ArgumentError: a missing file, a bad line (named with its number), or no requests.
    """
    p = _existing(path)
    rows = [_row(line, n, p) for n, line in _lines(p)]
    return _trace(p, rows, "ukv jsonl")


def load_mooncake(path: str | Path) -> Trace:
    """Read a Mooncake trace: ``timestamp`` (ms), ``input_length``, ``output_length`` and
    ``hash_ids`` (the prompt's 512-token block ids; optional) a line; arrivals in seconds
    from the first.

    Raises:
        ArgumentError: a missing file, a bad line (named with its number), or no requests.
    """
    p = _existing(path)
    keys = ("timestamp", "input_length", "output_length")
    objs = [(_json(line, n, p), line, n) for n, line in _lines(p)]
    rows = [_fields(o, keys, line, n, p) for o, line, n in objs]
    rows = [(t / 1000.0, pl, ol) for t, pl, ol in rows]
    hashes = None
    if objs and all("hash_ids" in o for o, _, _ in objs):
        hashes = [_hash_ids(o["hash_ids"], line, n, p) for o, line, n in objs]
    return _trace(p, rows, "mooncake jsonl", from_zero=True, hashes=hashes)


def _hash_ids(value: object, line: str, lineno: int, path: Path) -> np.ndarray:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ArgumentError(
            f"bad trace line {lineno} of {str(path)!r}: {line[:80]!r} (hash_ids must be a "
            "list of ints)"
        )
    return np.asarray(value, dtype=np.int64)


def load_azure(path: str | Path) -> Trace:
    """Read an Azure LLM inference trace (2023): CSV with ``TIMESTAMP`` (wall clock),
    ``ContextTokens`` and ``GeneratedTokens``; arrivals in seconds from the first.

    Raises:
        ArgumentError: a missing file, a missing column, a bad row (named with its line
            number), or no requests.
    """
    p = _existing(path)
    with open(p, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or ())
        if missing:
            raise ArgumentError(
                f"bad Azure trace {str(path)!r}: no column {', '.join(sorted(missing))} "
                f"(header {reader.fieldnames!r})"
            )
        rows = [_azure_row(r, reader.line_num, p) for r in reader]
    return _trace(p, rows, "azure csv", from_zero=True)


def load(path: str | Path) -> Trace:
    """Read a trace file in any of the formats of the module docstring (told apart by
    the ``.csv`` suffix, else by the keys of the first JSON line).

    Raises:
        ArgumentError: a missing file, an unknown format, or a bad line.
    """
    p = _existing(path)
    if p.suffix.lower() == ".csv":
        return load_azure(p)
    first = next(iter(_lines(p)), None)
    if first is None:
        raise ArgumentError(f"bad trace {str(path)!r}: no requests")
    obj = _json(first[1], first[0], p)
    if "timestamp" in obj and "input_length" in obj:
        return load_mooncake(p)
    if "arrival" in obj:
        return load_jsonl(p)
    raise ArgumentError(
        f"bad trace {str(path)!r}: line 1 has keys {sorted(obj)!r}; expected ukv "
        "(arrival, prompt_len, output_len) or Mooncake (timestamp, input_length, output_length)"
    )


def rescale(trace: Trace, rate_scale: float | None = None, rate: float | None = None) -> Trace:
    """Replay ``trace`` faster or slower: arrivals divided by ``rate_scale`` (2.0: twice
    the recorded request rate), or scaled so that the mean rate over the trace is ``rate``
    requests per second. Neither: the trace unchanged.

    Raises:
        ArgumentError: both given, a value that is not a positive finite number, or a
            target rate for a trace whose requests all arrive at once.
    """
    if rate_scale is not None and rate is not None:
        raise ArgumentError(
            f"give one of rate_scale ({rate_scale!r}) and rate ({rate!r}), not both"
        )
    if rate_scale is None and rate is None:
        return trace
    if rate is not None:
        _positive(rate, "rate")
        span = float(trace.arrival[-1] - trace.arrival[0])
        if span <= 0 or len(trace) < 2:
            raise ArgumentError(
                f"bad argument rate = {rate!r}: trace {trace.name!r} has no duration "
                "(every request arrives at once), so it has no rate to scale"
            )
        native = (len(trace) - 1) / span
        factor = rate / native
    else:
        factor = _positive(rate_scale, "rate_scale")
    start = trace.arrival[0]
    arrival = start + (trace.arrival - start) / factor
    what = f"arrivals scaled x{factor:.4g}" + (f" to {rate:g} req/s" if rate is not None else "")
    origin = f"{trace.origin}; {what}" if trace.origin else what
    return dataclasses.replace(trace, arrival=arrival, origin=origin)


def _positive(value: object, name: str) -> float:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not np.isfinite(value)
        or value <= 0
    ):
        raise ArgumentError(f"bad argument {name} = {value!r}: must be a positive number")
    return float(value)


def _existing(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise ArgumentError(f"bad trace path {str(path)!r}: no such file")
    return p


def _lines(p: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of the non-blank lines."""
    return [(n, line) for n, line in enumerate(p.read_text().splitlines(), 1) if line.strip()]


def _trace(
    p: Path,
    rows: list[tuple[float, int, int]],
    fmt: str,
    from_zero: bool = False,
    hashes: list[np.ndarray] | None = None,
) -> Trace:
    """Rows -> a trace sorted by arrival (stable); ``from_zero``: the first arrival at 0."""
    if not rows:
        raise ArgumentError(f"bad trace {str(p)!r}: no requests")
    a, pl, ol = (np.array(x) for x in zip(*rows))
    order = np.argsort(a, kind="stable")
    arrival = a[order].astype(np.float64)
    if from_zero:
        arrival -= arrival[0]
    span = float(arrival[-1] - arrival[0])
    origin = f"{fmt} {p.name}, {len(rows):,} requests over {span:,.1f} s"
    hs = tuple(hashes[i] for i in order.tolist()) if hashes is not None else None
    return Trace(
        p.stem, arrival, pl[order].astype(np.int64), ol[order].astype(np.int64), origin, hs
    )


def _json(line: str, lineno: int, path: Path) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ArgumentError(
            f"bad trace line {lineno} of {str(path)!r}: {line[:80]!r} ({e})"
        ) from None
    if not isinstance(obj, dict):
        raise ArgumentError(
            f"bad trace line {lineno} of {str(path)!r}: {line[:80]!r} (not an object)"
        )
    return obj


def _fields(
    obj: dict, keys: tuple[str, str, str], line: str, lineno: int, path: Path
) -> tuple[float, int, int]:
    """The three fields of one line: a time ``>= 0`` and two positive ints."""
    try:
        a, pl, ol = (obj[k] for k in keys)
    except KeyError as e:
        raise ArgumentError(
            f"bad trace line {lineno} of {str(path)!r}: {line[:80]!r} (no key {e})"
        ) from None
    ok = isinstance(a, int | float) and not isinstance(a, bool) and a >= 0
    for v in (pl, ol):
        ok = ok and isinstance(v, int) and not isinstance(v, bool) and v >= 1
    if not ok:
        raise ArgumentError(
            f"bad trace line {lineno} of {str(path)!r}: {line[:80]!r} ({keys[0]} must be "
            f">= 0, {keys[1]} and {keys[2]} positive ints)"
        )
    return float(a), int(pl), int(ol)


def _row(line: str, lineno: int, path: Path) -> tuple[float, int, int]:
    keys = ("arrival", "prompt_len", "output_len")
    return _fields(_json(line, lineno, path), keys, line, lineno, path)


def _azure_row(r: dict, lineno: int, path: Path) -> tuple[float, int, int]:
    """One CSV row: the timestamp as POSIX seconds (naive, as recorded), two counts."""
    text = f"{r['TIMESTAMP']},{r['ContextTokens']},{r['GeneratedTokens']}"
    try:
        stamp, _, frac = str(r["TIMESTAMP"]).strip().partition(".")
        base = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
        seconds = base.replace(tzinfo=datetime.UTC).timestamp() + float(f"0.{frac or 0}")
        pl, ol = int(r["ContextTokens"]), int(r["GeneratedTokens"])
    except (ValueError, TypeError) as e:
        raise ArgumentError(
            f"bad trace line {lineno} of {str(path)!r}: {text[:80]!r} ({e})"
        ) from None
    if pl < 1 or ol < 1:
        raise ArgumentError(
            f"bad trace line {lineno} of {str(path)!r}: {text[:80]!r} (ContextTokens and "
            "GeneratedTokens must be positive)"
        )
    return seconds, pl, ol


def make(spec: str, n: int | None = None, seed: int = 0) -> Trace:
    """A built-in trace by name (``chat``, ``long``, ``phase``: ``n`` requests, default
    ``DEFAULT_REQUESTS``) or a trace file (:func:`load`; ``n``: its first ``n`` requests
    by arrival, None: all of them)."""
    if spec in BUILTIN:
        count = DEFAULT_REQUESTS if n is None else n
        return {"chat": chat, "long": long, "phase": phase}[spec](count, seed)
    if spec.endswith((".jsonl", ".csv")) or Path(spec).is_file():
        trace = load(spec)
        if n is None or n >= len(trace):
            return trace
        _check_n(n)
        return window(trace, 0, n)
    raise ArgumentError(
        f"bad trace {spec!r}: expected one of {BUILTIN} or a .jsonl / .csv trace file"
    )


def window(trace: Trace, start: int, n: int) -> Trace:
    """Requests ``[start, start + n)`` of ``trace`` (by arrival), arrivals from the first
    of them; the seeds of a real trace are windows at different offsets."""
    _check_n(n)
    if not 0 <= start < len(trace):
        raise ArgumentError(f"bad window start {start!r}: the trace has {len(trace)} requests")
    end = min(start + n, len(trace))
    sl = slice(start, end)
    arrival = trace.arrival[sl] - trace.arrival[start]
    what = f"first {end - start:,} requests" if start == 0 else f"requests {start:,}..{end - 1:,}"
    return dataclasses.replace(
        trace,
        arrival=arrival,
        prompt_len=trace.prompt_len[sl],
        output_len=trace.output_len[sl],
        origin=f"{trace.origin}; {what}",
        hash_ids=trace.hash_ids[sl] if trace.hash_ids is not None else None,
    )


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ArgumentError(f"bad argument n = {n!r}: must be a positive int")

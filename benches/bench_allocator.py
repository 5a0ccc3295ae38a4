"""Python allocator bench (BENCHMARKS.md, suite 2): ukv's Python API next to SGLang's allocator.

The traces of suite 1, driven through ukv's PUBLIC Python API (``ukv.UnifiedKVPool``,
``pool.allocator("full").alloc / free / alloc_extend / alloc_decode``, ``pool.flush``) and,
in the same process, through SGLang's own unified pool + ``MultiEndedAllocator`` (the peer,
``benches/peer_sglang.py``). Both sides get the same geometry (the same ukv specs, the same
byte budget, the same page size), the same op trace, and both move real bytes in a CPU
buffer. ``torch.set_num_threads(1)`` for both (SGLang's frees otherwise pay OpenMP wake-ups
on a small box).

Traces (all on the grow-up "full" MHA sub-pool; the grow-down Mamba sub-pool is the empty
neighbour):

1. ``pair``: alloc(1 page) + free, eager, page size 1 and 16, pool half full.
2. ``reloc``: relocating free, eager: with 2 pages on top of a half-full pool, free the
   lower one, so exactly one page (the upper one) moves; only the free is timed. Both
   sides' move counters are checked: 1 page per free.
3. ``batch``: alloc 4096 pages in one call and free them all in one call, page size 1 and
   16; ``batch-half``: the same alloc, then free a random half of the pages (many
   relocations: timed alone as ``batch-half free``) and then the rest.
4. ``lazy``: lazy pool, page size 16: 2K pages live, free the lower K in one call (K
   holes), then ``flush(urgent=True)`` moves exactly K pages; free + flush are timed.
5. ``extend`` / ``decode``: page size 16, 256 requests with random prefixes (0..128
   tokens, last pages partly full): ``alloc_extend`` of 1..128 random tokens each, and
   ``alloc_decode`` of one token each. SGLang's ``MultiEndedAllocator`` runs these through
   a Triton kernel that has no CPU driver, so the peer cannot run them on CPU. The bench
   says so and, unless ``--no-peer-naive-extend``, also times the peer with SGLang's own
   pure-torch fallbacks (``alloc_extend_naive`` / ``alloc_decode_naive``, what its paged
   allocator uses without Triton) patched in for the kernel: an informative figure (marked
   ‡), not the engine's code path and not a target.

SGLang's zero-on-alloc of MHA pages is switched off in the peer (ukv does not zero pages on
alloc; zeroing 4096 pages is memset time, not bookkeeping).

Method: per trace and side, one warm-up round that also validates (markers written into
the moved pages' bytes must follow their ids; move counts as expected), then the
iteration count is calibrated to ``--round-s`` seconds per round, then ``--rounds`` rounds
are timed with ``time.perf_counter``, ukv and peer rounds interleaved, the garbage
collector off inside a round. A figure is the median over rounds of the mean µs per op.

Usage (from the repository root)::

    python benches/bench_allocator.py --out benches/results/allocator-cpu.md
    python benches/bench_allocator.py --quick          # smoke run, < 30 s
    python benches/bench_allocator.py --no-peer        # ukv alone

writes the markdown (and the raw numbers as .json next to it) and prints the table.
Without SGLang the bench runs ukv alone and the result file says why the peer is missing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import (  # noqa: E402 - benches/ is on sys.path now
    Config,
    command,
    environment,
    fmt_us,
    interleave,
    load_average,
    load_peer,
    timed_round,
    utc_now,
    write_results,
)
from sides import (  # noqa: E402
    FULL_SLOTS,
    FULL_SPEC,
    MAMBA_SPEC,
    TOTAL_BYTES,
    CheckError,
    PeerSide,
    Requests,
    UkvSide,
    check_stamps,
    half_full,
    must,
    requests,
)

# ----- trace sizes (the geometry is in sides.py) ---------------------------------------------

BATCH_PAGES = 4096
LAZY_KS = (1, 64, 1024)
BATCH_REQS = 256
PREFIX_MAX = 128
EXTEND_MAX = 128
SEED = 20261202

T0 = time.perf_counter()
TARGETS = {"pair": 20.0, "reloc": 20.0, "batch": 50.0, "batch-half": 50.0}


# ----- the naive extend/decode substitute for the peer ---------------------------------------


class _NaiveLaunch:
    """Stands in for a Triton ``kernel[grid](...)`` launch with SGLang's torch fallback."""

    def __init__(self, fn: Callable[..., None]) -> None:
        self._fn = fn

    def __getitem__(self, grid: object) -> Callable[..., None]:
        return self._fn


def _naive_extend(naive: Callable[..., None]) -> _NaiveLaunch:
    def launch(prefix_lens, seq_lens, last_loc, free_pages, out, _bs_pow2, page_size):
        naive(prefix_lens, seq_lens, last_loc, free_pages, out, page_size, out.device)

    return _NaiveLaunch(launch)


def _naive_decode(naive: Callable[..., None]) -> _NaiveLaunch:
    def launch(seq_lens, last_loc, free_pages, out, _bs_pow2, page_size):
        num_new = int(((seq_lens - 1) % page_size == 0).sum())
        naive(seq_lens, last_loc, free_pages, out, page_size, num_new)

    return _NaiveLaunch(launch)


class NaiveKernels:
    """Context manager: SGLang's unified_sub_pool uses its pure-torch extend/decode."""

    def __enter__(self) -> NaiveKernels:
        from sglang.srt.mem_cache.allocator import paged, unified_sub_pool

        self._mod = unified_sub_pool
        self._saved = (unified_sub_pool.alloc_extend_kernel, unified_sub_pool.alloc_decode_kernel)
        unified_sub_pool.alloc_extend_kernel = _naive_extend(paged.alloc_extend_naive)
        unified_sub_pool.alloc_decode_kernel = _naive_decode(paged.alloc_decode_naive)
        return self

    def __exit__(self, *exc: object) -> None:
        self._mod.alloc_extend_kernel, self._mod.alloc_decode_kernel = self._saved


# ----- traces ------------------------------------------------------------------------------
#
# A trace builder takes a side and returns (round_fn, expected_moves_per_op). round_fn(n,
# check) runs n ops and returns the timed seconds; with check=True (the warm-up round) it
# also validates the data movement, untimed.


def trace_pair(side: Any) -> tuple[Callable[[int, bool], float], float]:
    ps = side.page_size
    bg = half_full(side)
    alloc, free = side.alloc, side.free

    def run(n: int, check: bool) -> float:
        if check:
            for _ in range(n):
                ids = must(alloc(ps), "alloc")
                side.stamp(ids)
                check_stamps(side, ids, "pair alloc")
                free(ids)
            check_stamps(side, bg, "pair background")
            return 0.0
        t0 = time.perf_counter()
        for _ in range(n):
            free(alloc(ps))
        return time.perf_counter() - t0

    return run, 0.0


def trace_reloc(side: Any) -> tuple[Callable[[int, bool], float], float]:
    ps = side.page_size
    bg = half_full(side)
    alloc, free = side.alloc, side.free
    state = {"low": must(alloc(ps), "alloc")}
    side.stamp(state["low"])
    perf = time.perf_counter

    def run(n: int, check: bool) -> float:
        low = state["low"]
        total = 0.0
        for _ in range(n):
            high = alloc(ps)
            if check:
                side.stamp(must(high, "alloc"))
                before = side.translate(high)
            t0 = perf()
            free(low)
            total += perf() - t0
            if check:
                after = side.translate(high)
                if torch.equal(after, before):
                    raise CheckError(f"{side.label} reloc: the upper page did not move")
                check_stamps(side, high, "reloc survivor")
            low = high
        state["low"] = low
        if check:
            check_stamps(side, bg, "reloc background")
        return total

    return run, 1.0


def _half_masks(ps: int, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` (half, rest) token-position splits of a 4096-page batch: random halves of
    the pages, every token of a chosen page. The same list drives both sides (the bench
    uses one split, so every op moves the same number of pages)."""
    rng = np.random.default_rng(SEED + ps)
    out = []
    for _ in range(count):
        pages = np.sort(rng.permutation(BATCH_PAGES)[: BATCH_PAGES // 2])
        chosen = np.zeros(BATCH_PAGES, dtype=bool)
        chosen[pages] = True
        tok = np.repeat(chosen, ps)
        out.append((torch.from_numpy(np.flatnonzero(tok)), torch.from_numpy(np.flatnonzero(~tok))))
    return out


def trace_batch(side: Any) -> tuple[Callable[[int, bool], float], float]:
    ps = side.page_size
    alloc, free = side.alloc, side.free
    need = BATCH_PAGES * ps

    def run(n: int, check: bool) -> float:
        total = 0.0
        for _ in range(n):
            t0 = time.perf_counter()
            ids = alloc(need)
            t1 = time.perf_counter()
            if check:
                side.stamp(must(ids, "batch alloc"))
                check_stamps(side, ids, "batch alloc")
            t2 = time.perf_counter()
            free(ids)
            total += time.perf_counter() - t2 + (t1 - t0)
        return total

    return run, 0.0


class HalfTrace:
    """alloc 4096 pages, free a random half (timed alone too), free the rest."""

    def __init__(self, side: Any, masks: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.side = side
        self.masks = masks
        self.free_only = 0.0  # seconds spent in the relocating half-frees of the last round

    def __call__(self, n: int, check: bool) -> float:
        side, masks = self.side, self.masks
        alloc, free = side.alloc, side.free
        need = BATCH_PAGES * side.page_size
        perf = time.perf_counter
        total = 0.0
        half_total = 0.0
        for i in range(n):
            half_idx, rest_idx = masks[i % len(masks)]
            t0 = perf()
            ids = alloc(need)
            t1 = perf()
            half, rest = ids[half_idx], ids[rest_idx]
            if check:
                side.stamp(ids)
            t2 = perf()
            free(half)
            t3 = perf()
            if check:
                check_stamps(side, rest, "batch-half survivors")
            t4 = perf()
            free(rest)
            t5 = perf()
            total += (t1 - t0) + (t3 - t2) + (t5 - t4)
            half_total += t3 - t2
        self.free_only = half_total
        return total


def trace_lazy(side: Any, k: int) -> tuple[Callable[[int, bool], float], float]:
    ps = side.page_size
    alloc, free, flush = side.alloc, side.free, side.flush
    low_idx = torch.arange(k * ps)
    high_idx = torch.arange(k * ps, 2 * k * ps)

    def run(n: int, check: bool) -> float:
        total = 0.0
        for _ in range(n):
            ids = must(alloc(2 * k * ps), "lazy alloc")
            low, high = ids[low_idx], ids[high_idx]
            if check:
                side.stamp(ids)
            t0 = time.perf_counter()
            free(low)
            flush(urgent=True)
            total += time.perf_counter() - t0
            if check:
                check_stamps(side, high, "lazy survivors")
            free(high)
            if flush(urgent=True) != 0:
                raise CheckError(f"{side.label} lazy: the reset flush moved pages")
        return total

    return run, float(k)


def _new_page_positions(prefix: np.ndarray, seq: np.ndarray, ps: int) -> torch.Tensor:
    """Output positions that fall in freshly allocated pages (to free them after a call)."""
    pos = []
    base = 0
    for p, s in zip(prefix.tolist(), seq.tolist()):
        boundary = -(-p // ps) * ps
        pos.extend(range(base + max(boundary - p, 0), base + s - p))
        base += s - p
    return torch.tensor(pos, dtype=torch.int64)


def _check_tokens(side: Any, out: torch.Tensor, req: Requests, seq: torch.Tensor, what: str):
    ps = side.page_size
    if out.numel() != int((seq - req.prefix).sum()) or out.unique().numel() != out.numel():
        raise CheckError(f"{side.label} {what}: {out.numel()} ids, not unique or wrong count")
    base = 0
    for r in range(len(seq)):
        p, s = int(req.prefix[r]), int(seq[r])
        cont = min(s, -(-p // ps) * ps) - p
        if cont > 0:
            want = torch.arange(1, cont + 1) + int(req.last_loc[r])
            if not torch.equal(out[base : base + cont], want):
                raise CheckError(f"{side.label} {what}: request {r} did not continue its page")
        base += s - p
    side.stamp(out)
    check_stamps(side, out, what)


def trace_extend(side: Any) -> tuple[Callable[[int, bool], float], float]:
    rng = np.random.default_rng(SEED)
    prefix = rng.integers(0, PREFIX_MAX + 1, BATCH_REQS)
    ext = rng.integers(1, EXTEND_MAX + 1, BATCH_REQS)
    req = requests(side, prefix)
    seq_np = prefix + ext
    seq = torch.from_numpy(seq_np.astype(np.int64))
    pre = req.prefix
    n_tok = int(ext.sum())
    new_pos = _new_page_positions(prefix, seq_np, side.page_size)
    alloc_extend, free = side.alloc_extend, side.free

    def run(n: int, check: bool) -> float:
        total = 0.0
        for _ in range(n):
            t0 = time.perf_counter()
            out = alloc_extend(pre, pre, seq, seq, req.last_loc, n_tok)
            total += time.perf_counter() - t0
            out = must(out, "alloc_extend")
            if check:
                _check_tokens(side, out, req, seq, "alloc_extend")
            free(out[new_pos])
        return total

    return run, 0.0


def trace_decode(side: Any) -> tuple[Callable[[int, bool], float], float]:
    rng = np.random.default_rng(SEED + 1)
    prefix = rng.integers(1, PREFIX_MAX + 1, BATCH_REQS)
    req = requests(side, prefix)
    seq_np = prefix + 1
    seq = torch.from_numpy(seq_np.astype(np.int64))
    new_pos = _new_page_positions(prefix, seq_np, side.page_size)
    alloc_decode, free = side.alloc_decode, side.free

    def run(n: int, check: bool) -> float:
        total = 0.0
        for _ in range(n):
            t0 = time.perf_counter()
            out = alloc_decode(seq, seq, req.last_loc)
            total += time.perf_counter() - t0
            out = must(out, "alloc_decode")
            if check:
                _check_tokens(side, out, req, seq, "alloc_decode")
            free(out[new_pos])
        return total

    return run, 0.0


# ----- harness -----------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table."""

    trace: str
    what: str
    page_size: int
    mode: str
    target: float | None = None
    ukv: dict[str, Any] | None = None
    peer: dict[str, Any] | None = None
    peer_note: str = ""
    peer_substitute: bool = False  # the peer ran with SGLang's torch fallback patched in

    @property
    def ratio(self) -> float | None:
        if not self.ukv or not self.peer:
            return None
        return self.peer["us"] / self.ukv["us"]

    @property
    def met(self) -> bool | None:
        if self.target is None or self.ratio is None:
            return None
        return self.ratio >= self.target


class Runner:
    def __init__(self, cfg: Config, factory: Any | None) -> None:
        self.cfg = cfg
        self.factory = factory
        self.rows: list[Row] = []
        self.geometry: dict[str, Any] = {}

    def sides(self, page_size: int, lazy: bool) -> list[Any]:
        out: list[Any] = [UkvSide(page_size, lazy)]
        if self.factory is not None:
            out.append(PeerSide(self.factory, page_size, lazy))
        key = f"ps={page_size} {'lazy' if lazy else 'eager'}"
        if key not in self.geometry:
            self.geometry[key] = {s.label: s.geometry() for s in out}
        return out

    def measure(
        self,
        sides: list[Any],
        runs: list[Callable[[int, bool], float]],
        moves_per_op: float,
        extra: Callable[[int, Any], dict[str, list[float]]] | None = None,
    ) -> list[dict[str, Any]]:
        """Warm up + validate each side, calibrate, then interleave timed rounds.

        Returns one dict per side: ``us`` (median µs/op), ``rounds`` (µs/op per round),
        ``iters`` (ops per round), ``moves_per_op`` (page moves counted), and any extras.
        """
        cfg = self.cfg
        extras: list[dict[str, list[float]]] = [{} for _ in sides]
        moves: list[float] = [0.0 for _ in sides]

        def warm(j: int, n: int) -> float:
            side, run = sides[j], runs[j]
            m0 = side.moved()
            run(n, True)
            t = timed_round(run, n) / n
            moved = (side.moved() - m0) / (2 * n)
            if abs(moved - moves_per_op) > 1e-9:
                raise CheckError(
                    f"{side.label}: {moved} page moves per op in warm-up, expected {moves_per_op}"
                )
            return t

        def timed(j: int, n: int) -> float:
            side = sides[j]
            m0 = side.moved()
            sec = timed_round(runs[j], n)
            moves[j] = (side.moved() - m0) / n
            if abs(moves[j] - moves_per_op) > 1e-9:
                raise CheckError(
                    f"{side.label}: {moves[j]} page moves per op, expected {moves_per_op}"
                )
            if extra is not None:
                for k, v in extra(j, n).items():
                    extras[j].setdefault(k, []).append(v)
            return sec

        iters, per_round = interleave(cfg, len(sides), warm, timed)
        out = []
        for j in range(len(sides)):
            d: dict[str, Any] = {
                "us": statistics.median(per_round[j]),
                "rounds": [round(x, 3) for x in per_round[j]],
                "iters": iters[j],
                "moves_per_op": moves[j],
            }
            for k, v in extras[j].items():
                d[k] = statistics.median(v)
                d[k + "_rounds"] = [round(x, 3) for x in v]
            out.append(d)
        return out

    def add(self, row: Row, results: list[dict[str, Any]], note: str = "") -> None:
        row.ukv = results[0]
        if len(results) > 1:
            row.peer = results[1]
        row.peer_note = note
        self.rows.append(row)
        _print_row(row)

    # -- traces --

    def simple(self, trace: str, what: str, ps: int, lazy: bool, build: Callable) -> None:
        sides = self.sides(ps, lazy)
        built = [build(s) for s in sides]
        runs = [b[0] for b in built]
        res = self.measure(sides, runs, built[0][1])
        self.add(
            Row(trace, what, ps, "lazy" if lazy else "eager", TARGETS.get(trace)),
            res,
            "",
        )

    def half(self, ps: int) -> None:
        sides = self.sides(ps, False)
        masks = _half_masks(ps, 1)
        traces = [HalfTrace(s, masks) for s in sides]
        # Count the relocations the first split causes (identical on both sides: each
        # pairs the i-th smallest surviving page of the vacated band with the i-th hole).
        per_op_moves = []
        for s, tr in zip(sides, traces):
            m0 = s.moved()
            tr(len(masks), True)
            per_op_moves.append((s.moved() - m0) / len(masks))
        if len({round(x, 6) for x in per_op_moves}) != 1:
            raise CheckError(f"batch-half: sides moved different page counts {per_op_moves}")

        def extra(j: int, n: int) -> dict[str, list[float]]:
            return {"free_half_us": traces[j].free_only / n * 1e6}

        res = self.measure(sides, traces, per_op_moves[0], extra)
        what = "alloc 4096 pages + free random half + free rest"
        self.add(Row("batch-half", what, ps, "eager", TARGETS["batch-half"]), res)
        free_res = [
            {
                "us": r["free_half_us"],
                "rounds": r["free_half_us_rounds"],
                "iters": r["iters"],
                "moves_per_op": r["moves_per_op"],
            }
            for r in res
        ]
        what = f"the random-half free alone ({per_op_moves[0]:.0f} pages move)"
        self.add(
            Row("batch-half free", what, ps, "eager", TARGETS["batch-half"]),
            free_res,
            "",
        )

    def extend_decode(self, naive: bool) -> None:
        ps = 16
        for trace, build, what in (
            ("extend", trace_extend, f"alloc_extend, {BATCH_REQS} requests"),
            ("decode", trace_decode, f"alloc_decode, {BATCH_REQS} requests"),
        ):
            sides = self.sides(ps, False)
            note = ""
            substitute = False
            if len(sides) > 1:
                note = _peer_extend_failure(sides[1], trace)
                if note and not naive:
                    sides = sides[:1]
            if len(sides) > 1 and note:
                # Peer row with SGLang's pure-torch fallback patched in (informative).
                with NaiveKernels():
                    built = [build(s) for s in sides]
                    res = self.measure(sides, [b[0] for b in built], 0.0)
                note = (
                    f"‡ {note}. The peer figure marked ‡ is SGLang's MultiEndedAllocator with "
                    f"its own pure-torch `alloc_{trace}_naive` (the fallback its "
                    "PagedTokenToKVPoolAllocator uses without Triton) patched in for the kernel: "
                    "informative, not the engine's code path"
                )
                substitute = True
            else:
                if len(sides) > 1:
                    note = ""
                built = [build(s) for s in sides]
                res = self.measure(sides, [b[0] for b in built], 0.0)
            self.add(Row(trace, what, ps, "eager", None, peer_substitute=substitute), res, note)


def _peer_extend_failure(side: PeerSide, trace: str) -> str:
    """Why the peer's own alloc_extend/alloc_decode cannot run on CPU ('' when it can)."""
    a = side.allocator
    one = torch.ones(1, dtype=torch.int64)
    neg = torch.full((1,), -1, dtype=torch.int64)
    try:
        if trace == "extend":
            out = a.alloc_extend(one * 0, one * 0, one, one, neg, 1)
        else:
            ids = must(side.alloc(side.page_size), "alloc")
            try:
                out = a.alloc_decode(one * 2, one * 2, ids[:1])
            finally:
                side.free(ids)
        if out is not None:
            side.free(out)
        return ""
    except Exception as exc:  # noqa: BLE001 - the reason is the result
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return (
            f"SGLang MultiEndedAllocator.alloc_{trace} launches a Triton kernel, which fails "
            f"on CPU ({type(exc).__name__}: {msg})"
        )


def _print_row(row: Row) -> None:
    u = f"{row.ukv['us']:.2f}" if row.ukv else "-"
    p = f"{row.peer['us']:.2f}" if row.peer else "-"
    r = f"{row.ratio:.1f}x" if row.ratio else "-"
    t = f">= {row.target:.0f}x" if row.target else "-"
    m = {True: "met", False: "NOT met", None: "-"}[row.met]
    print(
        f"[{time.perf_counter() - T0:5.1f}s] "
        f"{row.trace:>16} ps={row.page_size:<3} {row.mode:5} ukv {u:>9} µs  "
        f"peer {p:>9} µs  {r:>7}  {t:>7} {m}",
        flush=True,
    )


# ----- environment and output --------------------------------------------------------------


def markdown(meta: dict[str, Any], rows: list[Row]) -> str:
    env = meta["env"]
    lines = [
        "# ukv Python allocator bench (CPU) vs SGLang",
        "",
        f"- command: `{meta['command']}`",
        f"- machine: {env['nproc']} CPUs ({env['cpu']}), {env['memory']} RAM; "
        f"load average at start `{meta['load_start']}`, at end `{meta['load_end']}`",
        f"- versions: Python {env['python']}, torch {env['torch']} "
        f"({env['torch_threads']} thread), numpy {env['numpy']}, ukv {env['ukv']}, "
        f"sglang {env['sglang']}",
        f"- date: {meta['date']} (run took {meta['wall_s']:.0f} s)",
        f"- peer: {meta['peer']}",
        f"- geometry: one {TOTAL_BYTES >> 20} MiB CPU buffer, grow-up `full` "
        f"MHA 2 layers x 2 heads x 16 bf16 ({FULL_SPEC.entry_bytes} B/token, "
        f"{FULL_SLOTS} token slots) + grow-down Mamba "
        f"({MAMBA_SPEC.entry_bytes} B/slot); the same ukv spec objects build both sides. "
        f"Pages per side: {_geometry_line(meta['geometry'])}.",
        "- method: per trace and side a warm-up round that validates (markers written into "
        "the pages' bytes must follow their ids after every move; move counters must match "
        "the trace), iterations calibrated to "
        f"{meta['config']['round_s']} s per round, {meta['config']['rounds']} timed rounds "
        "with ukv and peer rounds interleaved, GC off inside a round, `time.perf_counter`; "
        "each figure is the median over rounds of the mean µs per op. ratio = peer / ukv.",
        "- fairness: same specs, byte budget, page size and op trace; both move real bytes "
        "(ukv: NumPy page copies in its buffer; SGLang: its KV pools' `move_physical_pages`). "
        "SGLang's zero-on-alloc of MHA pages is switched off (ukv does not zero on alloc). "
        "Pools are half full for `pair` and `reloc` (SGLang's free cost grows with its "
        "free-id list).",
        "",
        "| trace | what | page size | mode | ukv µs | peer µs | ratio | target | result |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r.ratio:.1f}x" if r.ratio is not None else "—"
        target = f">= {r.target:.0f}x" if r.target is not None else "—"
        met = {True: "met", False: "**not met**", None: "—"}[r.met]
        if r.peer is None:
            met = "peer missing" if r.target is not None else "—"
        peer = fmt_us(r.peer and r.peer["us"]) + (" ‡" if r.peer_substitute else "")
        lines.append(
            f"| {r.trace} | {r.what} | {r.page_size} | {r.mode} | {fmt_us(r.ukv and r.ukv['us'])} "
            f"| {peer} | {ratio} | {target} | {met} |"
        )
    notes = sorted({r.peer_note for r in rows if r.peer_note})
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    lines += ["", "Per-round µs/op and iteration counts are in the .json beside this file.", ""]
    return "\n".join(lines)


def _geometry_line(geo: dict[str, Any]) -> str:
    parts = []
    for key, sides in geo.items():
        desc = ", ".join(
            f"{label} {g['num_pages']} (first {g['first_page']}, {g['available_tokens']} "
            "tokens allocatable)"
            for label, g in sides.items()
        )
        parts.append(f"{key}: {desc}")
    return "; ".join(parts)


# ----- main --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="markdown result file (.json written beside)")
    parser.add_argument("--quick", action="store_true", help="short smoke run (< 30 s)")
    parser.add_argument("--rounds", type=int, help="timed rounds per trace and side (>= 5)")
    parser.add_argument("--round-s", type=float, help="seconds per timed round")
    parser.add_argument("--no-peer", action="store_true", help="run ukv alone")
    parser.add_argument(
        "--no-peer-naive-extend",
        dest="naive",
        action="store_false",
        help="do not time the peer's extend/decode with SGLang's pure-torch fallback",
    )
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    load_start = load_average()
    torch.set_num_threads(1)
    cfg = Config.from_args(
        args,
        quick=Config(rounds=3, round_s=0.01, warm_iters=2, min_iters=2, max_iters=2000),
        full=Config(rounds=7, round_s=0.25, warm_iters=5, min_iters=10, max_iters=200_000),
    )

    factory, peer_desc = load_peer(args.no_peer)

    runner = Runner(cfg, factory)
    for ps in (1, 16):
        runner.simple("pair", "alloc(1 page) + free", ps, False, trace_pair)
    for ps in (1, 16):
        runner.simple(
            "reloc", "free of the lower of 2 pages (1 page moves)", ps, False, trace_reloc
        )
    for ps in (1, 16):
        runner.simple("batch", f"alloc {BATCH_PAGES} pages + free them all", ps, False, trace_batch)
    for ps in (1, 16):
        runner.half(ps)
    for k in LAZY_KS:
        runner.simple(
            "lazy",
            f"free lower {k} of {2 * k} pages + flush(urgent) ({k} moves)",
            16,
            True,
            lambda s, k=k: trace_lazy(s, k),
        )
    runner.extend_decode(args.naive)

    meta = {
        "command": command("bench_allocator.py", argv),
        "env": environment(),
        "date": utc_now(),
        "peer": peer_desc,
        "config": cfg.__dict__,
        "geometry": runner.geometry,
        "load_start": load_start,
        "load_end": load_average(),
        "wall_s": time.perf_counter() - t_start,
    }
    text = markdown(meta, runner.rows)
    print()
    print(text)
    if args.out:
        data = {
            **meta,
            "rows": [
                {
                    "trace": r.trace,
                    "what": r.what,
                    "page_size": r.page_size,
                    "mode": r.mode,
                    "target": r.target,
                    "ratio": r.ratio,
                    "met": r.met,
                    "ukv": r.ukv,
                    "peer": r.peer,
                    "peer_note": r.peer_note,
                    "peer_substitute": r.peer_substitute,
                }
                for r in runner.rows
            ],
        }
        write_results(args.out, text, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Host time of ukv's allocator on a CUDA pool, side by side with SGLang's, in one process.

Issue 8, item 6. Both allocators run on ``device="cuda"`` with real pools: ukv's
``UnifiedKVPool`` and SGLang 0.5.23's ``UnifiedKVPool`` + ``MultiEndedAllocator`` built by
``benches/peer_sglang.py`` (its KV pools move real bytes; its zero-on-alloc of MHA pages is
switched off, as in the CPU bench). Same geometry as the CPU allocator bench
(``bench_allocator.py``: one 18 MiB buffer, a grow-up "full" MHA sub-pool of 256 B/token and
a grow-down Mamba neighbour), the same op traces, rounds of ukv and SGLang interleaved.

What is measured (host µs per op; a round is ``synchronize``, ``n`` ops, ``synchronize``,
then ukv's ``pool.sync_frees()`` where it exists, so frees of CUDA ids that ukv applies
later are inside the round; the figure is the minimum over rounds of the mean µs per op):

1. ``pair``: alloc(1 page) + free, page size 1 and 16, eager, pool half full.
2. ``reloc``: 1024 one-page allocations live; per op alloc one page and free a random one
   of the others (the same seeded sequence on every side): one page moves per op.
3. ``batch``: alloc 4096 pages in one call + free them all in one call, eager and lazy.
4. ``translate``: ``translate_kv_loc`` of 256 live ids, with ``out=`` (what a captured CUDA
   graph calls) and without.
5. ``set_kv``: one layer, 64 tokens, 8 heads x 128 bf16, at physical ids: ukv's
   ``pool.set_kv`` against ``k_view[page, tok] = k; v_view[page, tok] = v`` in torch on the
   same views (``page``/``tok`` precomputed, so torch does the least work).

ukv runs each allocator trace twice: with the ids ``alloc`` returns (CUDA tensors, freed as
CUDA ids: what an engine that keeps ids on the device does) and with ``alloc(n,
host=True)`` ids freed as CPU ids (an engine that tracks ids on the host). SGLang runs its
natural path (CUDA ids). Every trace validates first: markers written into each page's
bytes must follow their ids through every move.

Then a no-wait probe: with ``torch.cuda._sleep`` (~20 ms) queued on the stream, one call of
each ukv entry point must return in < 1 ms of host time (max of 3 tries after a warm-up
call; frees are relocating ones); SGLang's alloc and eager free (which reads a device flag)
are shown for comparison.

Usage (repository root; ukv and the peer on ``PYTHONPATH``, see
``benches/prepare_peer_wheels.sh`` for a machine without registry access)::

    python benches/bench_cuda_host.py --out OUT_DIR [--commit SHA]   # on the GPU: ~1-2 min
    python benches/bench_cuda_host.py --quick --device cpu           # smoke run of every path

writes ``OUT_DIR/cuda-host.md`` and ``OUT_DIR/cuda-host.json`` (``cpu-host.*`` with
``--device cpu``: the same code on a CPU pool, for checking the bench, not a result), and
rewrites them after every row, so a run cut short keeps what it measured (the title says
PARTIAL). ``--commit`` names ukv's commit where the tree has no ``.git``. Where this ukv
build lacks a newer entry point (``alloc(host=True)``, ``sync_frees``,
``stats().gpu_waits`` / ``inflight_frees``) the affected figures are left out and the
notes say why. A variant, row or probe that raises is recorded with its error and the run
goes on.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import ukv

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import (  # noqa: E402
    Config,
    command,
    fmt_us,
    interleave,
    load_peer,
    machine,
    ukv_commit,
    utc_now,
    versions,
    write_results,
)
from sides import (  # noqa: E402 - the sides and checks of the CPU bench
    MAMBA_SPEC,
    CheckError,
    PeerSide,
    UkvSide,
    check_stamps,
    half_full,
    must,
    requests,
)

BATCH_PAGES = 4096
RELOC_LIVE = 1024
TRANSLATE_IDS = 256
SETKV_TOKENS = 64
SETKV_SPEC = ukv.MHASpec("full", 4, 8, 128, torch.bfloat16, grow="up")
SETKV_BYTES = 64 << 20
PROBE_REQS = 8
SLEEP_CYCLES = 40_000_000  # torch.cuda._sleep: ~20 ms at an H200's ~2 GHz
PROBE_TRIES = 3
PROBE_LIMIT_US = 1000.0
SEED = 20261204

# (minimum ratio reference/ukv, maximum ukv µs) per trace: issue 8's targets.
TARGETS: dict[str, tuple[float | None, float | None]] = {
    "pair": (8.0, 25.0),
    "reloc": (8.0, None),
    "batch": (5.0, None),
    "translate": (2.0, 15.0),
    "set_kv": (1.0, None),
}

T0 = time.perf_counter()


# ----- device helpers ----------------------------------------------------------------------


@dataclass
class Device:
    """The device under test and its synchronisation (a no-op on the CPU)."""

    name: str

    @property
    def cuda(self) -> bool:
        return self.name == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def queue_sleep(self) -> None:
        """Queue ~20 ms of GPU work on the current stream (nothing on the CPU)."""
        if self.cuda:
            torch.cuda._sleep(SLEEP_CYCLES)


# ----- variants: one allocator path each ----------------------------------------------------


@dataclass
class Variant:
    """One way of driving an allocator: its side (pool), and the alloc/free it uses."""

    label: str
    side: Any
    alloc: Callable[[int], Any]  # ids (a tensor) or None; the traces check where it counts
    free: Callable[[torch.Tensor], None]

    def settle(self) -> None:
        self.side.settle()

    def inflight(self) -> int | None:
        """ukv's count of frees not applied yet (``stats().inflight_frees``), else None."""
        pool = getattr(self.side, "pool", None)
        if not isinstance(pool, ukv.UnifiedKVPool):
            return None
        return getattr(pool.stats(), "inflight_frees", None)


UKV_DEV = "ukv, device ids"
UKV_HOST = "ukv, host ids"
SGLANG = "sglang"


class Sides:
    """Builds the variants of one (page size, mode): ukv with device ids, ukv with host ids
    (when ``alloc(host=True)`` exists), SGLang (when it loaded). Each gets its own pool."""

    def __init__(self, dev: Device, factory: Any | None) -> None:
        self.dev = dev
        self.factory = factory
        self.notes: set[str] = set()

    def build(self, page_size: int, lazy: bool, host: bool = True) -> list[Variant]:
        """Args: host: also the host-ids variant (where ukv has it)."""
        u = UkvSide(page_size, lazy, self.dev.name)
        out = [Variant(UKV_DEV, u, u.alloc, u.free)]
        if u.alloc_host is None:
            self.notes.add(
                "this ukv build has no `alloc(n, host=True)`: the host-ids rows are left out"
            )
        elif host:
            h = UkvSide(page_size, lazy, self.dev.name)
            assert h.alloc_host is not None  # the same build as u
            out.append(Variant(UKV_HOST, h, h.alloc_host, h.free))
        if not hasattr(u.pool, "sync_frees"):
            self.notes.add(
                "this ukv build has no `pool.sync_frees()`: a free of CUDA ids is applied "
                "inside `free` (after copying the ids to the host)"
            )
        if self.factory is not None:
            try:
                p = PeerSide(self.factory, page_size, lazy, self.dev.name)
            except Exception as exc:  # noqa: BLE001 - the row runs without its reference
                self.notes.add(f"the SGLang side did not build: {_failed(SGLANG, exc)['error']}")
                return out
            out.append(Variant(SGLANG, p, p.alloc, p.free))
        return out


# ----- traces: build(variant) -> run(n, check) ---------------------------------------------

Run = Callable[[int, bool], None]


def trace_pair(v: Variant) -> Run:
    ps = v.side.page_size
    bg = half_full(v.side)
    alloc, free = v.alloc, v.free

    def run(n: int, check: bool) -> None:
        for _ in range(n):
            ids = alloc(ps)
            if check:
                v.side.stamp(must(ids, "alloc"))
                check_stamps(v.side, ids, "pair alloc")
            free(ids)
        if check:
            v.settle()
            check_stamps(v.side, bg, "pair background")

    return run


def trace_reloc(v: Variant) -> Run:
    ps = v.side.page_size
    alloc, free = v.alloc, v.free
    live = [must(alloc(ps), "alloc") for _ in range(RELOC_LIVE)]
    for ids in live:
        v.side.stamp(ids)
    # Victims among the older allocations; the new page sits on top, so every free of an
    # older page makes the top page move into the hole.
    victims = np.random.default_rng(SEED).integers(0, RELOC_LIVE, 1 << 16).tolist()
    state = {"i": 0}

    def run(n: int, check: bool) -> None:
        i = state["i"]
        for _ in range(n):
            j = victims[i % len(victims)]
            i += 1
            new = alloc(ps)
            if check:
                v.side.stamp(must(new, "alloc"))
            free(live[j])
            live[j] = new
        state["i"] = i
        if check:
            v.settle()
            for ids in live:
                check_stamps(v.side, ids, "reloc survivors")

    return run


def trace_batch(v: Variant) -> Run:
    need = BATCH_PAGES * v.side.page_size
    alloc, free = v.alloc, v.free

    def run(n: int, check: bool) -> None:
        for _ in range(n):
            ids = alloc(need)
            if check:
                v.side.stamp(must(ids, "batch alloc"))
                check_stamps(v.side, ids, "batch alloc")
            free(ids)

    return run


def trace_translate(use_out: bool) -> Callable[[Variant], Run]:
    def build(v: Variant) -> Run:
        ids = must(v.alloc(TRANSLATE_IDS), "alloc")
        v.side.stamp(ids)
        translate = v.side.allocator.translate_kv_loc
        buf = torch.empty_like(ids)

        def run(n: int, check: bool) -> None:
            if use_out:
                for _ in range(n):
                    translate(ids, out=buf)
            else:
                for _ in range(n):
                    translate(ids)
            if check:
                check_stamps(v.side, ids, "translate")
                if use_out and not torch.equal(buf, v.side.translate(ids)):
                    raise AssertionError(f"{v.label}: translate(out=) wrote other ids")

        return run

    return build


class SetKv:
    """One layer's K/V store of SETKV_TOKENS tokens at physical ids of a ukv pool: ukv's
    ``set_kv`` and the same store written by hand in torch, on the same views."""

    def __init__(self, dev: Device, page_size: int) -> None:
        self.pool = ukv.UnifiedKVPool(
            SETKV_BYTES, [SETKV_SPEC, MAMBA_SPEC], page_size=page_size, device=dev.name
        )
        a = self.pool.allocator("full")
        ids = must(a.alloc(SETKV_TOKENS), "alloc")
        self.loc = a.translate_kv_loc(ids)
        self.page = self.loc // page_size
        self.tok = self.loc % page_size
        gen = torch.Generator(device=dev.name).manual_seed(SEED)
        shape = (SETKV_TOKENS, SETKV_SPEC.head_num, SETKV_SPEC.head_dim)
        self.k = torch.randn(shape, generator=gen, device=dev.name, dtype=torch.bfloat16)
        self.v = torch.randn(shape, generator=gen, device=dev.name, dtype=torch.bfloat16)
        ks, vs = self.pool.kv_views("full")
        self.k_view, self.v_view = ks[0], vs[0]  # shape: [num_pages, page_size, H, D]
        self.page_size = page_size

    def variants(self) -> list[Variant]:
        return [
            Variant("ukv", self, _no_alloc, _no_free),
            Variant("torch", self, _no_alloc, _no_free),
        ]

    def settle(self) -> None:
        pass

    def build(self, v: Variant) -> Run:
        pool, loc, k, val = self.pool, self.loc, self.k, self.v
        k_view, v_view, page, tok = self.k_view, self.v_view, self.page, self.tok

        def run_ukv(n: int, check: bool) -> None:
            for _ in range(n):
                pool.set_kv("full", 0, loc, k, val)
            if check:
                self.check("ukv")

        def run_torch(n: int, check: bool) -> None:
            for _ in range(n):
                k_view[page, tok] = k
                v_view[page, tok] = val
            if check:
                self.check("torch")

        return run_ukv if v.label == "ukv" else run_torch

    def check(self, label: str) -> None:
        got_k = self.k_view[self.page, self.tok]
        got_v = self.v_view[self.page, self.tok]
        if not (torch.equal(got_k, self.k) and torch.equal(got_v, self.v)):
            raise AssertionError(f"set_kv {label}: the stored rows differ from K/V")
        self.k_view[self.page, self.tok] = 0  # the next check proves a fresh store
        self.v_view[self.page, self.tok] = 0


def _no_alloc(n: int) -> None:
    return None


def _no_free(ids: torch.Tensor) -> None:
    pass


# ----- timing ------------------------------------------------------------------------------


def timed_round(dev: Device, v: Variant, run: Run, n: int) -> tuple[float, int | None]:
    """Time ``n`` ops: synchronise, run, synchronise, apply deferred frees.

    Returns:
        (seconds, ukv's in-flight frees right after the loop, or None where not counted).
    """
    gc.collect()
    dev.sync()
    gc.disable()
    try:
        t0 = time.perf_counter()
        run(n, False)
        inflight = v.inflight()
        dev.sync()
        v.settle()
        dev.sync()
        return time.perf_counter() - t0, inflight
    finally:
        gc.enable()


def measure(
    dev: Device,
    cfg: Config,
    variants: list[Variant],
    build: Callable[[Variant], Run],
    moves: tuple[float, float] = (0.0, 0.0),
) -> dict[str, dict[str, Any]]:
    """Validate each variant in a warm-up round, calibrate its ops per round, then run
    ``cfg.rounds`` rounds with the variants interleaved. A variant that raises is reported
    with its error and leaves the others running (one GPU session, one try).

    Args:
        moves: The range page moves per op must fall in (over the timed rounds). A free of
            CUDA ids that ukv applies later may share its compaction with another, so a
            relocating trace allows a little under one; with device ids any surplus is
            allowed (an alloc that runs before the free's ids land is compacted later).

    Returns:
        Per variant label: ``us`` (min over rounds of µs/op), ``median_us``, ``rounds``,
        ``iters``, ``moves_per_op`` (page moves over the timed rounds) and
        ``max_inflight_frees`` (None where not counted); or ``error`` alone.
    """
    out: dict[str, dict[str, Any]] = {}
    runs: list[Run | None] = [None] * len(variants)
    moved = [0] * len(variants)
    inflight: list[list[int]] = [[] for _ in variants]

    def warm(j: int, n: int) -> float:
        v = variants[j]
        run = runs[j] = build(v)
        run(n, True)
        return timed_round(dev, v, run, n)[0] / n

    def timed(j: int, n: int) -> float:
        v, run = variants[j], runs[j]
        assert run is not None  # warm built it
        m0 = _moved(v)
        sec, n_inflight = timed_round(dev, v, run, n)
        moved[j] += _moved(v) - m0
        if n_inflight is not None:
            inflight[j].append(n_inflight)
        return sec

    def failed(j: int, exc: BaseException) -> None:
        out[variants[j].label] = _failed(variants[j].label, exc)

    iters, per_round = interleave(cfg, len(variants), warm, timed, failed)
    for j, v in enumerate(variants):
        n = iters[j]
        if n is None:
            continue
        per_op = moved[j] / (n * cfg.rounds)
        # A free of device ids lands after the next alloc when its copy has not arrived
        # yet: that alloc takes pages above the ones being freed, and the free then
        # compacts them down. Extra moves are that cost, reported in the row, not an error.
        hi = float("inf") if v.label == UKV_DEV else moves[1]
        if not moves[0] <= per_op <= hi:
            out[v.label] = _failed(
                v.label, CheckError(f"{per_op:.3f} page moves per op, expected {moves}")
            )
            continue
        out[v.label] = {
            "us": min(per_round[j]),
            "median_us": statistics.median(per_round[j]),
            "rounds": [round(x, 3) for x in per_round[j]],
            "iters": n,
            "moves_per_op": per_op,
            "max_inflight_frees": max(inflight[j]) if inflight[j] else None,
        }
    return {v.label: out[v.label] for v in variants}  # in the variants' order


def _failed(label: str, exc: BaseException) -> dict[str, Any]:
    """Print the traceback; the error, in one line, for the result files."""
    traceback.print_exception(exc, file=sys.stderr)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    print(f"{label}: FAILED: {type(exc).__name__}: {text}", file=sys.stderr, flush=True)
    return {"error": f"{type(exc).__name__}: {text}"}


def _moved(v: Variant) -> int:
    moved = getattr(v.side, "moved", None)
    return moved() if moved is not None else 0


# ----- rows --------------------------------------------------------------------------------


@dataclass
class Row:
    """One op at one page size and mode: every ukv variant against one reference."""

    trace: str
    what: str
    page_size: int
    mode: str
    results: dict[str, dict[str, Any]]
    reference: str  # "sglang" or "torch"

    @property
    def ref(self) -> dict[str, Any] | None:
        """The reference's result, None when it is missing or failed."""
        ref = self.results.get(self.reference)
        return ref if ref is not None and "us" in ref else None

    def ukv_labels(self) -> list[str]:
        return [k for k in self.results if k != self.reference]

    def ratio(self, label: str) -> float | None:
        mine = self.results[label]
        if self.ref is None or "us" not in mine:
            return None
        return self.ref["us"] / mine["us"]

    def met(self, label: str) -> bool | None:
        """Both targets of the trace; None when one cannot be judged and none failed."""
        if "us" not in self.results[label]:
            return None
        min_ratio, max_us = TARGETS[self.trace]
        checks: list[bool | None] = []
        if max_us is not None:
            checks.append(self.results[label]["us"] <= max_us)
        if min_ratio is not None:
            ratio = self.ratio(label)
            checks.append(None if ratio is None else ratio >= min_ratio)
        if False in checks:
            return False
        return None if None in checks else True


def target_text(trace: str) -> str:
    min_ratio, max_us = TARGETS[trace]
    parts = []
    if max_us is not None:
        parts.append(f"<= {max_us:.0f} µs")
    if min_ratio is not None:
        parts.append("<= torch" if trace == "set_kv" else f">= {min_ratio:.0f}x")
    return ", ".join(parts)


class Bench:
    def __init__(self, dev: Device, cfg: Config, factory: Any | None) -> None:
        self.dev = dev
        self.cfg = cfg
        self.sides = Sides(dev, factory)
        self.rows: list[Row] = []
        self.on_row: Callable[[], object] = lambda: None

    def add(self, trace: str, what: str, ps: int, mode: str, res: dict, ref: str) -> None:
        row = Row(trace, what, ps, mode, res, ref)
        self.rows.append(row)
        self.on_row()
        ref_us = f"{row.ref['us']:9.2f} µs" if row.ref else "        - µs"
        for label in row.ukv_labels():
            mine = res[label]
            us = f"{mine['us']:8.2f} µs" if "us" in mine else f"error: {mine['error']}"
            r = row.ratio(label)
            met = {True: "met", False: "NOT met", None: "-"}[row.met(label)]
            print(
                f"[{time.perf_counter() - T0:5.1f}s] {what[:34]:34} ps={ps:<2} {mode:5} "
                f"{label:>15} {us}  {ref} {ref_us}  {f'{r:.1f}x' if r else '-':>7}  {met}",
                flush=True,
            )

    def row(
        self,
        trace: str,
        what: str,
        ps: int,
        mode: str,
        build: Callable[[Variant], Run],
        moves: tuple[float, float] = (0.0, 0.0),
        host: bool = True,
    ) -> None:
        """Measure one allocator row against SGLang; a failure that hits the whole row is
        recorded as the row's error and the run goes on."""
        try:
            variants = self.sides.build(ps, mode == "lazy", host)
            res = measure(self.dev, self.cfg, variants, build, moves)
        except Exception as exc:  # noqa: BLE001 - reported in the row
            res = {"ukv": _failed("ukv", exc)}
        self.add(trace, what, ps, mode, res, SGLANG)

    def allocator_rows(self) -> None:
        for ps in (1, 16):
            self.row("pair", "alloc(1 page) + free", ps, "eager", trace_pair)
        what = f"alloc 1 page + free a random one of {RELOC_LIVE} live (1 page moves)"
        for ps in (1, 16):
            self.row("reloc", what, ps, "eager", trace_reloc, moves=(0.9, 1.0))
        what = f"alloc {BATCH_PAGES} pages + free them all"
        for mode in ("eager", "lazy"):
            for ps in (1, 16):
                self.row("batch", what, ps, mode, trace_batch)

    def translate_rows(self) -> None:
        for ps in (1, 16):
            for use_out in (True, False):
                what = f"translate_kv_loc, {TRANSLATE_IDS} ids" + (" (out=)" if use_out else "")
                # Translate takes device ids on every path: no separate host-ids variant.
                self.row("translate", what, ps, "eager", trace_translate(use_out), host=False)

    def set_kv_rows(self) -> None:
        what = (
            f"set_kv one layer, {SETKV_TOKENS} tokens x {SETKV_SPEC.head_num} x "
            f"{SETKV_SPEC.head_dim} bf16, vs `k_view[page, tok] = k` (and V) in torch"
        )
        for ps in (1, 16):
            try:
                store = SetKv(self.dev, ps)
                res = measure(self.dev, self.cfg, store.variants(), store.build)
            except Exception as exc:  # noqa: BLE001 - reported in the row
                res = {"ukv": _failed("ukv", exc)}
            self.add("set_kv", what, ps, "eager", res, "torch")


# ----- the no-wait probe -------------------------------------------------------------------


@dataclass
class Probe:
    """One call timed with GPU work queued ahead of it."""

    call: str
    side: str
    us: list[float] = field(default_factory=list)
    gpu_waits: int | None = None  # ukv's stats().gpu_waits moved by the timed calls
    compare_only: bool = False  # SGLang's calls: shown for comparison, not held to the limit
    error: str = ""

    @property
    def worst(self) -> float:
        return max(self.us) if self.us else float("nan")

    @property
    def met(self) -> bool | None:
        if self.error:
            return False if not self.compare_only else None
        return None if self.compare_only else self.worst < PROBE_LIMIT_US


def _gpu_waits(pool: ukv.UnifiedKVPool) -> int | None:
    return getattr(pool.stats(), "gpu_waits", None)


class NoWaitProbe:
    """Each entry point: one warm-up call, then PROBE_TRIES calls, each right after
    ``torch.cuda._sleep`` was queued, prepared (untimed, synchronised) beforehand."""

    def __init__(self, dev: Device, factory: Any | None) -> None:
        self.dev = dev
        self.factory = factory
        self.probes: list[Probe] = []
        self.notes: list[str] = []
        self.on_group: Callable[[], object] = lambda: None

    def time(
        self,
        call: str,
        side: str,
        fn: Callable[[Any], Any],
        prepare: Callable[[], Any] = lambda: None,
        cleanup: Callable[[Any, Any], None] = lambda state, out: None,
        pool: ukv.UnifiedKVPool | None = None,
    ) -> None:
        probe = Probe(call, side, compare_only=side != "ukv")
        try:
            state = prepare()
            cleanup(state, fn(state))  # warm-up: compiles and caches what the call needs
            waits0 = _gpu_waits(pool) if pool is not None else None
            for _ in range(PROBE_TRIES):
                state = prepare()
                self.dev.sync()
                self.dev.queue_sleep()
                t0 = time.perf_counter()
                out = fn(state)
                probe.us.append((time.perf_counter() - t0) * 1e6)
                self.dev.sync()
                cleanup(state, out)
            waits1 = _gpu_waits(pool) if pool is not None else None
            if waits0 is not None and waits1 is not None:
                probe.gpu_waits = waits1 - waits0
        except Exception as exc:  # noqa: BLE001 - reported in the probe table
            probe.error = _failed(f"probe {side} {call}", exc)["error"]
        self.probes.append(probe)
        met = {True: "met", False: "NOT met", None: "-"}[probe.met]
        print(
            f"[{time.perf_counter() - T0:5.1f}s] probe {side:>6} {call:<34} "
            f"max {probe.worst:9.1f} µs  {met} {probe.error}",
            flush=True,
        )

    def sleep_ms(self) -> float:
        """How long the queued sleep keeps the GPU busy (synchronise right after it)."""
        self.dev.sync()
        t0 = time.perf_counter()
        self.dev.queue_sleep()
        self.dev.sync()
        return (time.perf_counter() - t0) * 1e3

    def run_all(self) -> None:
        ps = 16
        groups = [self.ukv_probes, self.lazy_flush_probe]
        if self.factory is not None:
            groups.append(self.sglang_probes)
        for group in groups:
            try:
                group(ps)
            except Exception as exc:  # noqa: BLE001 - a failed set-up loses its group only
                self.notes.append(f"{group.__name__} failed: {_failed('probe', exc)['error']}")
            self.on_group()

    def ukv_probes(self, ps: int) -> None:
        side = UkvSide(ps, False, self.dev.name)
        pool, a = side.pool, side.allocator
        keep = must(a.alloc(TRANSLATE_IDS), "alloc")  # pages below, so frees relocate
        buf = torch.empty_like(keep)
        t = lambda call, fn, **kw: self.time(call, "ukv", fn, pool=pool, **kw)  # noqa: E731
        free_later = lambda state, out: out is not None and a.free(out)  # noqa: E731
        t("alloc", lambda s: a.alloc(ps), cleanup=free_later)
        self.extend_decode_probes(side, t, free_later)
        host_alloc = side.alloc_host or (lambda n: must(a.alloc(n), "alloc").cpu())
        if side.alloc_host is None:
            self.notes.append(
                "free (host ids): the ids come from `alloc(n).cpu()`, prepared before the "
                "sleep (this ukv build has no `alloc(n, host=True)`)"
            )
        # Relocating frees: the lower of two fresh pages goes, so the upper one moves.
        two = lambda alloc: lambda: must(alloc(2 * ps), "alloc")  # noqa: E731
        low = lambda ids: a.free(ids[:ps])  # noqa: E731
        high = lambda ids, out: a.free(ids[ps:])  # noqa: E731
        t("free (host ids), relocating", low, prepare=two(host_alloc), cleanup=high)
        t("free (device ids), relocating", low, prepare=two(a.alloc), cleanup=high)

        def group() -> torch.Tensor:
            ids = must(a.alloc(8 * ps), "alloc")
            a.free_group_begin()
            for i in range(4):  # the lower 4 pages, one free each: the upper 4 move down
                a.free(ids[i * ps : (i + 1) * ps])
            return ids

        end = lambda ids: a.free_group_end()  # noqa: E731
        upper = lambda ids, out: a.free(ids[4 * ps :])  # noqa: E731
        t("free_group_end (4 relocating frees)", end, prepare=group, cleanup=upper)
        t("translate_kv_loc (out=)", lambda s: a.translate_kv_loc(keep, out=buf))
        store = SetKv(self.dev, ps)
        t("set_kv", lambda s: store.pool.set_kv("full", 0, store.loc, store.k, store.v))
        t("available_size", lambda s: a.available_size())
        t("stats", lambda s: pool.stats())
        side.settle()

    def extend_decode_probes(self, side: UkvSide, t: Callable, free_later: Callable) -> None:
        rng = np.random.default_rng(SEED)
        prefix = rng.integers(1, 64, PROBE_REQS)
        req = requests(side, prefix)
        dev = self.dev.name
        pre = req.prefix
        ext = torch.from_numpy(rng.integers(1, 40, PROBE_REQS))
        seq = pre + ext
        args = (pre.to(dev), pre, seq.to(dev), seq, req.last_loc.to(dev), int(ext.sum()))
        t(
            "alloc_extend",
            lambda s: side.alloc_extend(*args),
            cleanup=self._free_new(side, pre, seq),
        )
        dec = pre + 1
        dargs = (dec.to(dev), dec, req.last_loc.to(dev))
        t(
            "alloc_decode",
            lambda s: side.alloc_decode(*dargs),
            cleanup=self._free_new(side, pre, dec),
        )

    @staticmethod
    def _free_new(side: UkvSide, pre: torch.Tensor, seq: torch.Tensor) -> Callable:
        """Cleanup: free the pages an extend/decode call opened (those past each prefix's
        last page), so every try starts from the same state."""
        ps = side.page_size
        pos: list[int] = []
        base = 0
        for p, s in zip(pre.tolist(), seq.tolist()):
            boundary = -(-p // ps) * ps
            pos.extend(range(base + max(boundary - p, 0), base + s - p))
            base += s - p
        idx = torch.tensor(pos, dtype=torch.int64)

        def cleanup(state: Any, out: torch.Tensor | None) -> None:
            out = must(out, "alloc_extend/decode")
            if len(idx):
                side.free(out[idx.to(out.device)])

        return cleanup

    def lazy_flush_probe(self, ps: int) -> None:
        side = UkvSide(ps, True, self.dev.name)
        a = side.allocator

        def holes() -> None:
            ids = must(a.alloc(8 * ps), "alloc")
            a.free(ids[: 4 * ps])  # the lower half: 4 holes under 4 live pages
            side.settle()

        t = lambda s: side.pool.flush(urgent=False)  # noqa: E731
        self.time("flush (non-urgent, lazy)", "ukv", t, prepare=holes, pool=side.pool)

    def sglang_probes(self, ps: int) -> None:
        side = PeerSide(self.factory, ps, False, self.dev.name)
        must(side.alloc(TRANSLATE_IDS), "alloc")  # pages below, so frees relocate
        self.time("alloc", "sglang", lambda s: side.alloc(ps), cleanup=lambda s, o: side.free(o))
        self.time(
            "free (device ids), relocating, eager",
            "sglang",
            lambda ids: side.free(ids[:ps]),
            prepare=lambda: must(side.alloc(2 * ps), "alloc"),
            cleanup=lambda ids, out: side.free(ids[ps:]),
        )


# ----- output ------------------------------------------------------------------------------


def markdown(meta: dict[str, Any], rows: list[Row], probes: list[Probe]) -> str:
    sleep = "—" if meta["sleep_ms"] is None else f"~{meta['sleep_ms']:.1f} ms"
    partial = (
        "" if meta["complete"] else " (PARTIAL: the run had not finished when this was written)"
    )
    lines = [
        f"# ukv allocator host time on a {meta['device'].upper()} pool vs SGLang{partial}",
        "",
        f"- command: `{meta['command']}`",
        f"- machine: {meta['machine']}",
        f"- versions: {meta['versions']}",
        f"- date: {meta['date']} (run took {meta['wall_s']:.0f} s); git commit {meta['commit']}",
        f"- peer: {meta['peer']}",
        "- geometry: as `bench_allocator.py` (18 MiB buffer, grow-up `full` MHA 2 layers x 2 "
        "heads x 16 bf16 = 256 B/token, grow-down Mamba 160 B/slot), on the device; "
        f"`set_kv` on its own 64 MiB pool of {SETKV_SPEC.layer_num} layers x "
        f"{SETKV_SPEC.head_num} heads x {SETKV_SPEC.head_dim} bf16.",
        f"- method: per row and variant a validating warm-up round, ops per round calibrated "
        f"to {meta['config']['round_s']} s, {meta['config']['rounds']} rounds with the "
        "variants interleaved; a round is `synchronize`, n ops, `synchronize`, "
        "`pool.sync_frees()` (ukv, where it exists), `synchronize`; no sync inside the loop; "
        "GC off in a round. Figure: min over rounds of mean host µs per op (median in the "
        ".json). ratio = reference / ukv.",
        "- SGLang: its natural path (ids on the device, eager free reads a device flag); "
        "zero-on-alloc of MHA pages switched off (ukv does not zero pages).",
        "",
        "| op | page size | mode | ukv variant | ukv µs | reference | ref µs | ratio | "
        "moves/op (ukv, ref) | ukv frees in flight | target | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines += [_row_line(row, label) for label in row.ukv_labels()]
    lines += [
        "",
        f"## No-wait probe (page size 16; {sleep} of `torch.cuda._sleep` queued before each "
        "timed call)",
        "",
        f"| side | call | host µs, max of {PROBE_TRIES} | tries (µs) | GPU waits counted | "
        "target | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in probes:
        waits = "—" if p.gpu_waits is None else str(p.gpu_waits)
        target = "shown for comparison" if p.compare_only else f"< {PROBE_LIMIT_US:.0f} µs"
        met = {True: "met", False: "**not met**", None: "—"}[p.met]
        tries = ", ".join(f"{x:.1f}" for x in p.us)
        if p.error:
            met = f"error: {p.error}"
        worst = fmt_us(p.worst) if p.us else "—"
        lines.append(f"| {p.side} | {p.call} | {worst} | {tries} | {waits} | {target} | {met} |")
    notes = sorted(set(meta["notes"]))
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    lines.append("")
    return "\n".join(lines)


def _row_line(row: Row, label: str) -> str:
    """One table line: a ukv variant of ``row`` against its reference."""
    mine, ref = row.results[label], row.results.get(row.reference)
    ratio = row.ratio(label)
    result = {True: "met", False: "**not met**", None: "—"}[row.met(label)]
    errors = [
        f"{k}: {r['error']}" for k, r in ((label, mine), (row.reference, ref)) if r and "error" in r
    ]
    if errors:
        result = "error: " + "; ".join(errors)
    moves = ", ".join(f"{r['moves_per_op']:.2f}" if r and "us" in r else "—" for r in (mine, ref))
    inflight = mine.get("max_inflight_frees")
    return (
        f"| {row.what} | {row.page_size} | {row.mode} | {label} | "
        f"{fmt_us(mine['us']) if 'us' in mine else '—'} | {row.reference} | "
        f"{fmt_us(ref['us']) if ref and 'us' in ref else 'missing' if ref is None else '—'} | "
        f"{f'{ratio:.1f}x' if ratio else '—'} | {moves} | "
        f"{'—' if inflight is None else inflight} | {target_text(row.trace)} | {result} |"
    )


# ----- main --------------------------------------------------------------------------------


class Report:
    """The result files: rewritten after every row and probe group, so a run cut short
    (a time limit on the GPU session) still leaves what it measured."""

    def __init__(self, args: argparse.Namespace, dev: Device, cfg: Config, peer: str) -> None:
        self.out: Path | None = args.out
        self.dev = dev
        self.t_start = T0  # module import: the peer import counts too
        commit = args.commit or ukv_commit() or "unknown (no git checkout here; pass --commit)"
        self.meta: dict[str, Any] = {
            "command": command("bench_cuda_host.py", args.argv),
            "device": dev.name,
            "machine": machine(dev.cuda),
            "versions": versions(),
            "date": utc_now(),
            "commit": commit,
            "peer": peer,
            "config": asdict(cfg),
            "sleep_ms": None,
        }

    def write(self, bench: Bench, probe: NoWaitProbe | None, done: bool) -> str:
        """Write ``<device>-host.md`` and ``.json`` into ``--out`` (if given); return the
        markdown."""
        meta = {
            **self.meta,
            "complete": done,
            "notes": sorted(bench.sides.notes) + (probe.notes if probe else []),
            "wall_s": time.perf_counter() - self.t_start,
        }
        probes = probe.probes if probe else []
        text = markdown(meta, bench.rows, probes)
        if self.out is not None:
            data = {
                **meta,
                "rows": [asdict(r) for r in bench.rows],
                "probe": [asdict(p) for p in probes],
            }
            write_results(self.out / f"{self.dev.name}-host.md", text, data)
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="directory for <device>-host.md and .json")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--rounds", type=int, help="timed rounds per row and variant")
    parser.add_argument("--round-s", type=float, help="seconds per timed round")
    parser.add_argument("--no-peer", action="store_true", help="run ukv alone")
    parser.add_argument("--commit", help="ukv's git commit, where the tree has no .git")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    dev = Device(args.device)
    if dev.cuda and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu for a smoke run of the code paths")
        return 2
    torch.set_num_threads(1)  # as the CPU bench: SGLang's host-side cats stay single-threaded
    cfg = Config.from_args(
        args,
        quick=Config(rounds=2, round_s=0.005, warm_iters=2, min_iters=2, max_iters=200),
        full=Config(rounds=5, round_s=0.1, warm_iters=5, min_iters=5, max_iters=100_000),
    )

    factory, peer_desc = load_peer(args.no_peer, dev.name)

    report = Report(args, dev, cfg, peer_desc)
    bench = Bench(dev, cfg, factory)
    bench.on_row = lambda: report.write(bench, None, False)
    bench.allocator_rows()
    bench.translate_rows()
    bench.set_kv_rows()
    probe = NoWaitProbe(dev, factory)
    report.meta["sleep_ms"] = probe.sleep_ms()
    probe.on_group = lambda: report.write(bench, probe, False)
    probe.run_all()
    if not dev.cuda:
        probe.notes.append(
            "--device cpu: nothing is queued on a CPU, so the probe only runs the calls"
        )
    text = report.write(bench, probe, True)
    print()
    print(text)
    if args.out:
        print(f"wrote {args.out / dev.name}-host.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

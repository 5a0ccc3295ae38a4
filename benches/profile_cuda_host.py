"""Where the host time of ukv's small pool calls goes: cProfile, and the core's share.

The step bench (``bench_step_launches.py``) and ``bench_cuda_host.py`` give host µs per
call; this script says which Python and torch calls that time is spent in, for an
alloc+free pair (host ids and, on CUDA, device ids, whose frees are deferred until their
copy to the host lands), a relocating free, a translate, one layer's ``set_kv`` and a
4096-page batch, through the public API on ``bench_cuda_host.py``'s pools. cProfile
inflates Python-heavy paths, so read the shares, not the absolute figures. A second table,
without the profiler, puts each call's µs next to the native core's own calls for the same
work (``ukv._core.Arena`` methods called directly, no plan executed): the difference is
the Python layer, the conversions and the plan's execution.

Usage::

    python benches/profile_cuda_host.py --out profile.txt              # CUDA pool
    python benches/profile_cuda_host.py --device cpu --out profile.txt # CPU pool

(``--device cuda`` prints "needs CUDA" and exits 0 without a GPU.)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cuda_host import BATCH_PAGES, TRANSLATE_IDS, Device, SetKv  # noqa: E402
from harness import freeze_gc, relative_paths  # noqa: E402
from sides import UkvSide, half_full  # noqa: E402

CALLS = 2000


def cases(
    dev: Device, ps: int
) -> dict[str, tuple[Callable[[], object], Callable[[], object] | None]]:
    """Each case: (the public call, the core's own calls for the same work or None)."""
    side = UkvSide(ps, False, dev.name)
    full = side.allocator
    arena, i = full._arena, full._index  # the native core, for the core-only column
    half_full(side)  # pages below, so a free of the lower of two pages relocates
    ids = full.alloc(TRANSLATE_IDS)
    out = torch.empty_like(ids)
    host = side.alloc_host

    def core_pair() -> None:
        arena.free(i, arena.alloc(i, ps))

    def reloc() -> None:
        x = full.alloc(2 * ps)
        full.free(x[:ps])
        full.free(x[ps:])

    def core_reloc() -> None:
        x = arena.alloc(i, 2 * ps)
        arena.free(i, x[:ps])
        arena.free(i, x[ps:])

    need = BATCH_PAGES * ps
    eager, lazy = UkvSide(ps, False, dev.name), UkvSide(ps, True, dev.name)

    def batch(side: UkvSide) -> tuple[Callable[[], object], Callable[[], object]]:
        a, j = side.allocator._arena, side.allocator._index

        def public() -> None:
            side.free(side.alloc(need))
            side.settle()

        return public, lambda: a.free(j, a.alloc(j, need))

    store = SetKv(dev, ps)
    out_cases: dict[str, tuple[Callable[[], object], Callable[[], object] | None]] = {}
    if host is not None:
        out_cases["alloc+free pair, host ids"] = (lambda: full.free(host(ps)), core_pair)
    if dev.cuda:
        out_cases["alloc+free pair, device ids (free deferred until they land)"] = (
            lambda: full.free(full.alloc(ps)),
            core_pair,
        )
    out_cases.update(
        {
            "alloc 2 pages + relocating free + free": (reloc, core_reloc),
            f"translate {TRANSLATE_IDS} ids (out=)": (
                lambda: full.translate_kv_loc(ids, out=out),
                None,
            ),
            "set_kv, one layer, 64 tokens": (
                lambda: store.pool.set_kv("full", 0, store.loc, store.k, store.v),
                None,
            ),
            f"alloc {BATCH_PAGES} pages + free them (+ sync_frees), eager": batch(eager),
            f"alloc {BATCH_PAGES} pages + free them (+ sync_frees), lazy": batch(lazy),
        }
    )
    return out_cases


def us_per_call(dev: Device, fn: Callable[[], object], calls: int) -> float:
    """Min over 5 rounds of mean host µs per call (synchronised at the round's ends)."""
    best = float("inf")
    for _ in range(5):
        dev.sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dev.sync()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--calls", type=int, default=CALLS)
    args = ap.parse_args()
    dev = Device(args.device)
    if dev.cuda and not torch.cuda.is_available():
        print("needs CUDA")
        return 0
    torch.set_num_threads(1)
    all_cases = cases(dev, args.page_size)
    freeze_gc()
    text = io.StringIO()
    shares = []
    for name, (fn, core) in all_cases.items():
        calls = max(20, args.calls // 40) if "pages + free" in name else args.calls
        for _ in range(50):
            fn()
        public = us_per_call(dev, fn, calls)
        native = us_per_call(dev, core, calls) if core is not None else None
        shares.append((name, public, native))
        dev.sync()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            fn()
        dev.sync()
        prof.disable()
        text.write(f"\n=== {name}: {calls} calls\n")
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
    head = io.StringIO()
    head.write(
        f"device {args.device}, page size {args.page_size}; µs per call without the profiler "
        "(min of 5 rounds)\n\n| call | public API µs | core alone µs | core share |\n"
        "|---|---|---|---|\n"
    )
    for name, public, native in shares:
        core = "—" if native is None else f"{native:.2f}"
        share = "—" if native is None else f"{native / public:.0%}"
        head.write(f"| {name} | {public:.2f} | {core} | {share} |\n")
    # pstats names each function's file by its absolute path: record them relative to the
    # repository (and ukv's or torch's package), not to this machine's folders.
    report = head.getvalue() + relative_paths(text.getvalue())
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""GPU: where the host time of ukv's small CUDA-pool calls goes (cProfile).

The step bench (``bench_step_launches.py``) gives host µs per call; this script says which
Python and torch calls that time is spent in, for an alloc+free pair, a relocating free,
a translate and one layer's ``set_kv`` on a CUDA pool (pairs with host ids and with device
ids, whose frees are deferred until their copy to the host lands). cProfile inflates Python-heavy
paths, so read the shares, not the absolute figures.

Usage: ``python benches/profile_cuda_host.py --out profile.txt`` (prints "needs CUDA" and
exits 0 without a GPU).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

import torch
from bench_step_launches import _pool  # the same model and pool as the step bench
from harness import relative_paths

CALLS = 2000


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 0
    pool = _pool(16)
    full = pool.allocator("full")
    ps = 16
    ids = full.alloc(ps)
    phys = full.translate_kv_loc(ids)
    out = torch.empty_like(ids)
    k = torch.randn(ps, 8, 128, device="cuda", dtype=torch.bfloat16)

    def reloc() -> None:
        x = full.alloc(2 * ps)
        full.free(x[:ps])
        full.free(x[ps:])

    cases = {
        "alloc+free pair, host ids": lambda: full.free(full.alloc(ps, host=True)),
        "alloc+free pair, device ids (free deferred until they land)": lambda: full.free(
            full.alloc(ps)
        ),
        "alloc 2 pages + relocating free + free": reloc,
        "translate (out=)": lambda: full.translate_kv_loc(ids, out=out),
        "set_kv, one layer": lambda: pool.set_kv("full", 0, phys, k, k),
    }
    text = io.StringIO()
    for name, fn in cases.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        prof.disable()
        text.write(f"\n=== {name}: {CALLS} calls\n")
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
    # pstats names each function's file by its absolute path: record them relative to the
    # repository (and ukv's or torch's package), not to this machine's folders.
    report = relative_paths(text.getvalue())
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

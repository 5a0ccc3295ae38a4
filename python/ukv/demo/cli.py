"""``python -m ukv demo``: both hybrid variants served through ukv and checked against
the reference; a report and a PNG of the arena over time."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from ukv.demo import report
from ukv.demo.model import Variant
from ukv.demo.run import DemoConfig, run_variant

MIB = 1 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The demo's command-line options (all have built-in defaults)."""
    d = DemoConfig()
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--variant", choices=("mamba", "swa", "both"), default="both")
    p.add_argument(
        "--compaction",
        choices=("default", "eager", "lazy"),
        default="default",
        help="default: the Mamba hybrid eager, the SWA hybrid lazy (flush every step)",
    )
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--requests", type=int, default=d.num_requests, help="requests per variant")
    p.add_argument("--pool-mib", type=float, default=d.total_bytes / MIB, help="pool size (MiB)")
    p.add_argument("--page-size", type=int, default=d.page_size)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--png", default="ukv-demo-arena.png", help="where to write the picture ('' for none)"
    )
    p.add_argument("--synthetic", action="store_true", help="the older byte-pattern demo instead")


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit code 0 when every output matched the reference."""
    if args.synthetic:
        from ukv.demo import synthetic

        return synthetic.run(synthetic.defaults(args))
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        # The model's ops are tiny: intra-op threads cost more than they bring (measured
        # ~5x slower with 2 threads on a busy 2-core machine).
        torch.set_num_threads(1)
    demo = DemoConfig(
        num_requests=args.requests,
        total_bytes=int(args.pool_mib * MIB),
        page_size=args.page_size,
        seed=args.seed,
    )
    variants: tuple[Variant, ...] = ("mamba", "swa") if args.variant == "both" else (args.variant,)
    t0 = time.perf_counter()
    results = []
    for v in variants:
        lazy = v == "swa" if args.compaction == "default" else args.compaction == "lazy"
        r = run_variant(v, lazy=lazy, device=device, dtype=getattr(torch, args.dtype), demo=demo)
        print("\n".join(report.describe(r)))
        results.append(r)
    ok = all(r.identical for r in results)
    if args.png:
        report.arena_png(results, Path(args.png))
        print(f"arena over time (bottom: full attention; top: the other side): {args.png}")
    print(
        f"outputs identical to reference: {'yes' if ok else 'no'} "
        f"({time.perf_counter() - t0:.1f} s in all)"
    )
    return 0 if ok else 1

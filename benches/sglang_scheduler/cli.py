"""Command line: run configurations on one pool, print per-step lines and a summary JSON.

One process runs one pool (the drop-in must be installed before SGLang imports its
pool, and SGLang's own pool cannot be served after that), any number of
configurations: ``--matrix FILE`` (JSON, ``config.dumps``) or the single configuration
the flags describe. The last line printed is ``SUMMARY <json>``: per configuration the
per-step admitted tokens, the totals, the checks that ran and the error (null when
every check passed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any

from sglang_scheduler import bootstrap
from sglang_scheduler.config import CACHES, Config, loads


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[Config]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", choices=("sglang", "ukv"), default="ukv")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--hybrid", choices=("swa", "mamba"), default="swa")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument(
        "--lazy", action=argparse.BooleanOptionalAction, default=True, help="--lazy / --no-lazy"
    )
    p.add_argument("--eager", dest="lazy", action="store_false", help="same as --no-lazy")
    p.add_argument(
        "--cache",
        choices=CACHES,
        default=None,
        help="default: radix (Mamba at page size > 1: chunk)",
    )
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--more-swa", action="store_true", help="4 SWA layers and 2 full ones")
    p.add_argument("--scale", type=int, default=1, help="multiply pool sizes and arrival rate")
    p.add_argument(
        "--forward-delay-us", type=int, default=0, help="CUDA: each forward sleeps first"
    )
    p.add_argument(
        "--matrix", default=None, help="a JSON file of configurations (overrides the flags)"
    )
    p.add_argument("--sglang-path", default=os.environ.get("UKV_SGLANG_PATH", ""))
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    a = p.parse_args(argv)
    if a.matrix:
        with open(a.matrix) as f:
            configs = loads(f.read())
        configs = [Config(**{**c.to_json(), "pool": a.pool, "device": a.device}) for c in configs]
        return a, configs
    return a, [config_from_flags(a)]


def default_cache(hybrid: str, page_size: int) -> str:
    """SWA: ``hybrid`` (SGLang's SWARadixCache); Mamba: ``radix`` (its default tree) at
    page size 1, ``chunk`` above (its Mamba trees need page size 1 without the extra
    buffer)."""
    if hybrid == "swa":
        return "hybrid"
    return "radix" if page_size == 1 else "chunk"


def config_from_flags(a: argparse.Namespace) -> Config:
    cache = a.cache or default_cache(a.hybrid, a.page_size)
    fields: dict[str, Any] = dict(
        pool=a.pool,
        device=a.device,
        hybrid=a.hybrid,
        page_size=a.page_size,
        lazy=a.lazy,
        cache=cache,
        steps=a.steps,
        seed=a.seed,
        forward_delay_us=a.forward_delay_us,
    )
    return make_config(fields, more_swa=a.more_swa, scale=a.scale)


def make_config(fields: dict[str, Any], *, more_swa: bool = False, scale: int = 1) -> Config:
    """A configuration from its flags: SGLang's constraints and the pool sizes applied."""
    fields = dict(fields)
    if fields.get("hybrid") == "mamba":
        # SGLang: the Mamba radix cache without the extra buffer runs with the overlap
        # schedule off (its "auto" strategy resolves to no_buffer + disable_overlap).
        fields.setdefault("overlap", fields.get("cache") == "chunk")
    if more_swa:
        fields.update(full_layers=(1,), other_layers=(0, 2, 3))
    base = Config()
    grow = scale * (2 if fields.get("page_size", 1) > 1 else 1)
    fields.update(
        full_tokens=base.full_tokens * grow,
        swa_tokens=base.swa_tokens * grow,
        mamba_slots=base.mamba_slots * scale,
        max_running=base.max_running * scale,
        arrival_rate=base.arrival_rate * scale,
    )
    return Config(**fields)


def run_one(cfg: Config, quiet: bool) -> dict[str, Any]:
    from sglang_scheduler.loop import Loop

    if cfg.device == "cpu":
        from sglang_scheduler import events

        events.install_host_streams()
    from sglang_scheduler import patches

    t0 = time.perf_counter()
    counts_before = dict(patches.COUNTS)
    out: dict[str, Any] = {"config": cfg.name, "pool": cfg.pool, "error": None}
    loop = None
    try:
        loop = Loop(cfg)

        def on_step(rec: Any) -> None:
            if not quiet:
                print(
                    f"[{cfg.pool} {cfg.name}] step {rec.step:4d} {rec.kind:12s} "
                    f"admitted {rec.admitted_tokens:4d} tok / {rec.admitted_reqs} req "
                    f"decode {rec.decode_tokens:3d} running {rec.running:3d} "
                    f"waiting {rec.waiting:3d} retracted {rec.retracted}",
                    flush=True,
                )

        loop.run(on_step)
    except BaseException as exc:  # noqa: BLE001 - reported, the next config still runs
        if isinstance(exc, KeyboardInterrupt):
            raise
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-4000:]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if loop is not None:
        recs = loop.records
        out.update(
            steps=len(recs),
            requests=len(loop.arrivals),
            admitted_per_step=[r.admitted_tokens for r in recs],
            admitted_tokens=sum(r.admitted_tokens for r in recs),
            cached_tokens=sum(r.cached_tokens for r in recs),
            decode_tokens=sum(r.decode_tokens for r in recs),
            totals=dict(vars(loop.totals)),
            checks=loop.shadow.checks,
            tokens_checked=loop.shadow.tokens_checked,
            states_checked=loop.shadow.states_checked,
        )
    out["sglang_patches"] = {
        name: patches.COUNTS.get(name, 0) - counts_before.get(name, 0) for name in patches.APPLIED
    }
    return out


def main(argv: list[str] | None = None) -> int:
    a, configs = parse(argv)
    bootstrap.prepare(a.pool, a.device, a.sglang_path)
    results = []
    for cfg in configs:
        res = run_one(cfg, a.quiet)
        results.append(res)
        status = "ok" if res["error"] is None else f"FAILED {res['error'][:300]}"
        print(f"[{cfg.pool} {cfg.name}] {status} ({res['seconds']} s)", flush=True)
    print("SUMMARY " + json.dumps(results), flush=True)
    return 0 if all(r["error"] is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

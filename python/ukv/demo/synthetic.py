"""The older synthetic demo (``python -m ukv demo --synthetic``): bytes, no model.

It serves two phases of synthetic traffic through one byte buffer: first many short chat
requests (state-heavy: each holds one Mamba slot and a few hundred KV tokens), then a few
long documents (KV-heavy). The boundary between the sub-pools moves to wherever the load
puts it; every request's K/V and state bytes are written when it is admitted and checked,
byte for byte, when it leaves, after all the compaction that happened in between.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass

import torch

from ukv.pool import UnifiedKVPool
from ukv.specs import MambaSpec, MHASpec

MIB = 1 << 20


@dataclass
class Request:
    """One admitted request: its virtual KV tokens, its virtual state slot, its data seed."""

    tokens: torch.Tensor
    slot: torch.Tensor
    seed: int


def build_pool(device: str, total_mib: int, page_size: int, lazy: bool) -> UnifiedKVPool:
    """The demo model: 4 full-attention layers (2 KV heads × 64, bf16) growing down, and 4
    Mamba2-like layers (conv 3×512 bf16, temporal 8×32×32 fp32) growing up."""
    full = MHASpec("full", layer_num=4, head_num=2, head_dim=64, dtype=torch.bfloat16, grow="down")
    mamba = MambaSpec(
        "mamba",
        layer_num=4,
        conv_shapes=((3, 512),),
        conv_dtype=torch.bfloat16,
        temporal_shape=(8, 32, 32),
        temporal_dtype=torch.float32,
        grow="up",
    )
    return UnifiedKVPool(
        total_mib * MIB, [full, mamba], page_size=page_size, device=device, lazy=lazy
    )


def _fill(pool: UnifiedKVPool, req: Request) -> None:
    """Write deterministic data for the request into every layer of both sub-pools."""
    gen = torch.Generator().manual_seed(req.seed)
    full = pool.allocator("full")
    phys = full.translate_kv_loc(req.tokens.to(full.v2p.device))
    spec = pool.spec("full")
    n = len(req.tokens)
    for layer in range(spec.layer_num):
        k = torch.randn(n, 2, 64, generator=gen).to(pool.device)
        v = torch.randn(n, 2, 64, generator=gen).to(pool.device)
        pool.set_kv("full", layer, phys, k, v)
    conv, temporal = pool.state_views("mamba")
    s = int(pool.allocator("mamba").translate_kv_loc(req.slot)[0])
    conv[0][:, s] = (
        torch.randn(conv[0][:, s].shape, generator=gen).to(conv[0].dtype).to(pool.device)
    )
    temporal[:, s] = torch.randn(temporal[:, s].shape, generator=gen).to(pool.device)


def _check(pool: UnifiedKVPool, req: Request) -> bool:
    """Whether the request's bytes read back exactly as written."""
    gen = torch.Generator().manual_seed(req.seed)
    full = pool.allocator("full")
    phys = full.translate_kv_loc(req.tokens.to(full.v2p.device))
    ks, vs = pool.kv_views("full")
    ps = pool.page_size
    ok = True
    n = len(req.tokens)
    for layer in range(len(ks)):
        k = torch.randn(n, 2, 64, generator=gen).to(torch.bfloat16)
        v = torch.randn(n, 2, 64, generator=gen).to(torch.bfloat16)
        ok &= torch.equal(ks[layer][phys // ps, phys % ps].cpu(), k)
        ok &= torch.equal(vs[layer][phys // ps, phys % ps].cpu(), v)
    conv, temporal = pool.state_views("mamba")
    s = int(pool.allocator("mamba").translate_kv_loc(req.slot)[0])
    ok &= torch.equal(
        conv[0][:, s].cpu(), torch.randn(conv[0][:, s].shape, generator=gen).to(conv[0].dtype)
    )
    ok &= torch.equal(temporal[:, s].cpu(), torch.randn(temporal[:, s].shape, generator=gen))
    return bool(ok)


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns a process exit code (0 when every byte survived)."""
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    pool = build_pool(device, args.total_mib, args.page_size, args.lazy)
    full, mamba = pool.allocator("full"), pool.allocator("mamba")
    ps = pool.page_size
    rng = random.Random(args.seed)
    live: list[Request] = []
    checked = failed = 0
    print(pool.summary())
    print(
        f"{'phase':<10}{'peak reqs':>10}{'KV MiB':>10}{'state MiB':>11}{'gap MiB':>9}{'moved MiB':>11}"
    )
    t0 = time.perf_counter()
    for phase, (lo, hi, steps) in (
        ("chat", (32, 256, args.steps)),
        ("documents", (1024, 4096, args.steps)),
    ):
        peak = 0
        for _ in range(steps):
            want = -(-rng.randint(lo, hi) // ps) * ps
            if rng.random() < 0.55 or not live:
                tokens, slot = None, None
                if want <= full.schedulable_available_size():
                    tokens = full.alloc(want)
                if tokens is not None:
                    slot = mamba.alloc(1)
                    if slot is None:
                        full.free(tokens)
                        tokens = None
                if tokens is not None and slot is not None:
                    req = Request(tokens, slot, rng.randrange(1 << 30))
                    _fill(pool, req)
                    live.append(req)
                    peak = max(peak, len(live))
                    continue
            # Out of room or by chance: a request finishes; verify and release it.
            req = live.pop(rng.randrange(len(live)))
            checked += 1
            failed += not _check(pool, req)
            full.free(req.tokens)
            mamba.free(req.slot)
            pool.flush()
        st = pool.stats()
        used = {s.name: s.used_bytes / MIB for s in st.sub_pools}
        print(
            f"{phase:<10}{peak:>10}{used['full']:>10.1f}{used['mamba']:>11.1f}"
            f"{st.free_gap_bytes / MIB:>9.1f}{st.bytes_moved / MIB:>11.1f}"
        )
    for req in live:
        checked += 1
        failed += not _check(pool, req)
        full.free(req.tokens)
        mamba.free(req.slot)
    pool.flush(urgent=True)
    pool.check_invariants()
    dt = time.perf_counter() - t0
    print(
        f"checked {checked} requests byte for byte after {pool.stats().compactions} compactions: "
        f"{checked - failed} intact, {failed} corrupted; pool drained to "
        f"{full.allocated_count()} KV tokens and {mamba.allocated_count()} states ({dt:.1f} s)"
    )
    return 1 if failed else 0


def defaults(args: argparse.Namespace) -> argparse.Namespace:
    """This demo's settings from ``python -m ukv demo``'s options: a 24 MiB pool and 300
    operations per phase; device, page size, seed and lazy compaction as given."""
    return argparse.Namespace(
        device=args.device,
        total_mib=24,
        page_size=args.page_size,
        steps=300,
        lazy=args.compaction == "lazy",
        seed=args.seed,
    )

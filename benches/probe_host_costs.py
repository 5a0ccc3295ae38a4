"""Where host time goes on a CUDA call: the building blocks a plan executor can use.

Times (host µs per call, min over rounds, no sync inside a round) the pieces an engine-
facing call of ukv is made of, so the execution layer picks the cheapest combination:
torch allocation and copies (pinned → device, non-blocking), events, a table scatter,
Triton's JIT launch path against a direct relaunch of the compiled kernel, a kernel
reading its payload straight from pinned host memory (no copy at all), and the torch
chains an engine writes by hand (translate, K/V store).

It loads ukv's kernels from the source tree by path, so it needs no built wheel:

    python benches/probe_host_costs.py --out probe.md
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import platform
import sys

import torch
import triton

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benches"))
from harness import host_us_min, utc_now  # noqa: E402

ROUNDS, CALLS = 7, 400


def _load(name: str):
    path = ROOT / "python" / "ukv" / "kernels" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"probe_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def host_us(fn, calls: int = CALLS) -> float:
    """Min over rounds of host µs per call; the device is drained between rounds only."""
    return host_us_min(fn, calls, ROUNDS)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    tr = _load("translate")
    rows: list[tuple[str, float]] = []

    def row(name: str, fn, calls: int = CALLS) -> None:
        rows.append((name, host_us(fn, calls)))
        print(f"{name:70s} {rows[-1][1]:8.2f}", flush=True)

    pinned = torch.zeros(1 << 16, dtype=torch.int64, pin_memory=True)
    dbuf = torch.zeros(1 << 16, dtype=torch.int64, device=dev)
    table = torch.zeros(1 << 20, dtype=torch.int64, device=dev)
    idx = torch.arange(4, device=dev) * 7
    val = torch.arange(4, device=dev)
    row("noop python call", lambda: None)
    row("torch.empty(64, int64, cuda)", lambda: torch.empty(64, dtype=torch.int64, device=dev))
    row("pinned[:64] slice", lambda: pinned[:64])
    row(
        "dbuf[:64].copy_(pinned[:64], non_blocking)",
        lambda: dbuf[:64].copy_(pinned[:64], non_blocking=True),
    )
    row(
        "torch.empty + copy_ from pinned slice",
        lambda: torch.empty(64, dtype=torch.int64, device=dev).copy_(
            pinned[:64], non_blocking=True
        ),
    )
    row("pinned[:64].to(cuda, non_blocking)", lambda: pinned[:64].to(dev, non_blocking=True))
    row("table.index_copy_(0, idx4, val4)", lambda: table.index_copy_(0, idx, val))
    row("table[idx4] = val4", lambda: table.__setitem__(idx, val))
    row("torch.cuda.Event() + record()", lambda: torch.cuda.Event().record())
    ev = torch.cuda.Event()
    ev.record()
    row("event.query() (done)", ev.query)
    row("torch.cuda.current_stream()", torch.cuda.current_stream)
    row("torch._C._cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0))
    d_ids = torch.zeros(256, dtype=torch.int64, device=dev)
    row("d_ids.cpu() (sync)", lambda: d_ids.cpu(), calls=100)
    row(
        "pinned[:256].copy_(d_ids, non_blocking) (D2H async)",
        lambda: pinned[:256].copy_(d_ids, non_blocking=True),
    )

    # translate 256 ids: JIT path, direct relaunch, zero-copy pinned ids, torch chain
    ps = 16
    v2p = torch.arange(1 << 16, dtype=torch.int64, device=dev)
    ids = torch.randint(0, (1 << 16) * ps, (256,), device=dev)
    out = torch.empty_like(ids)
    k = tr.translate_kernel

    def jit_translate():
        return k[(1,)](
            ids, v2p, out, 256, v2p.numel(), 1, 1, 1, PAGE_SIZE=ps, BLOCK=1024, num_warps=4
        )

    compiled = jit_translate()
    row("translate 256: triton JIT launch (out=)", jit_translate)
    run, fn, meta = compiled.run, compiled.function, compiled.packed_metadata
    get_stream = torch._C._cuda_getCurrentRawStream

    def direct():
        run(
            1,
            1,
            1,
            get_stream(0),
            fn,
            meta,
            None,
            None,
            None,
            ids,
            v2p,
            out,
            256,
            v2p.numel(),
            1,
            1,
            1,
            ps,
            1024,
        )

    try:
        direct()
        torch.cuda.synchronize()
        row("translate 256: direct CompiledKernel.run", direct)
        ok_direct = True
    except Exception as e:  # noqa: BLE001 - report what the launcher says
        print("direct launch failed:", repr(e))
        ok_direct = False

    ref = v2p[ids // ps] * ps + ids % ps
    torch.cuda.synchronize()
    print("direct result correct:", ok_direct and bool(torch.equal(out, ref)))

    def chain():
        return v2p[ids // ps] * ps + ids % ps

    row("translate 256: torch chain v2p[ids//ps]*ps + ids%ps", chain)

    def empty_plus_jit():
        o = torch.empty(256, dtype=torch.int64, device=dev)
        k[(1,)](ids, v2p, o, 256, v2p.numel(), 1, 1, 1, PAGE_SIZE=ps, BLOCK=1024, num_warps=4)
        return o

    row("translate 256: torch.empty + JIT launch", empty_plus_jit)
    # zero-copy: ids in pinned host memory, read by the kernel over the bus
    h_ids = ids.cpu().pin_memory()
    try:
        out.zero_()
        k[(1,)](h_ids, v2p, out, 256, v2p.numel(), 1, 1, 1, PAGE_SIZE=ps, BLOCK=1024, num_warps=4)
        torch.cuda.synchronize()
        print("zero-copy pinned read correct:", bool(torch.equal(out, ref)))
    except Exception as e:  # noqa: BLE001
        print("zero-copy pinned read failed:", repr(e))

    # K/V store by hand, one layer, 64 tokens (what an engine writes without ukv)
    kv = torch.zeros(4096, 16, 8, 128, dtype=torch.bfloat16, device=dev)
    vv = torch.zeros_like(kv)
    loc = torch.randperm(4096 * 16, device=dev)[:64]
    kk = torch.randn(64, 8, 128, dtype=torch.bfloat16, device=dev)

    def by_hand():
        kv[loc // 16, loc % 16] = kk
        vv[loc // 16, loc % 16] = kk

    row("set K and V by hand: k_view[page, tok] = k (64 tokens)", by_hand)
    flat_k = kv.view(-1, 8, 128)
    flat_v = vv.view(-1, 8, 128)

    def by_hand_flat():
        flat_k[loc] = kk
        flat_v[loc] = kk

    row("set K and V by hand on flat views: k_flat[loc] = k", by_hand_flat)

    lines = [
        "# Host cost of the pieces of a CUDA call (µs per call, min of rounds)",
        "",
        "- command: `python benches/probe_host_costs.py --out ...`",
        f"- machine: {torch.cuda.get_device_name()}, {platform.processor() or platform.machine()}",
        f"- versions: torch {torch.__version__}, triton {triton.__version__}, Python {platform.python_version()}",
        f"- date: {utc_now()}",
        "",
        "| piece | host µs |",
        "|---|---|",
        *[f"| {n} | {t:.2f} |" for n, t in rows],
    ]
    text = "\n".join(lines) + "\n"
    if args.out:
        pathlib.Path(args.out).write_text(text)


if __name__ == "__main__":
    main()

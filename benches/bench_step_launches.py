"""GPU: kernel launches and host time of one serving step through a CUDA pool.

A step is what a serving engine does per request batch: ``alloc`` new tokens, translate
them to physical ids (the forward's metadata), ``set_kv`` for every layer (the store, part
of the forward anyway), and later a relocating ``free``. The issue's target is that ukv
adds at most 2 kernel launches beyond the store. Launches are counted with the torch
profiler (every CUDA kernel, Triton's included; memcpys are listed separately). Host
time per allocator call is measured with ``time.perf_counter`` over many calls.

Usage: ``python benches/bench_step_launches.py --out results.md`` (prints "needs CUDA" and
exits 0 without a GPU).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import ukv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import host_us_per_call, utc_now, write_results  # noqa: E402

LAYERS = 4


def _pool(page_size: int) -> ukv.UnifiedKVPool:
    full = ukv.MHASpec("full", LAYERS, 8, 128, torch.bfloat16, grow="down")
    mamba = ukv.MambaSpec(
        "mamba", 4, ((3, 1024),), torch.bfloat16, (8, 64, 64), torch.float32, grow="up"
    )
    return ukv.UnifiedKVPool(1 << 30, [full, mamba], page_size=page_size, device="cuda")


def _count(fn) -> tuple[int, int, list[str]]:
    """Run fn under the profiler; return (kernel launches, memcpys, kernel names)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels, copies = [], 0
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = ev.name
        if "memcpy" in name.lower() or "memset" in name.lower():
            copies += 1
        else:
            kernels.append(name)
    return len(kernels), copies, kernels


def launches(page_size: int) -> dict[str, object]:
    pool = _pool(page_size)
    full = pool.allocator("full")
    n = 4 * page_size
    keep = full.alloc(n)  # something below, so the free relocates
    k = torch.randn(n, 8, 128, device="cuda", dtype=torch.bfloat16)
    out: dict[str, object] = {"page_size": page_size}
    state: dict[str, torch.Tensor] = {}

    def alloc() -> None:
        state["ids"] = full.alloc(n)

    def translate() -> None:
        state["phys"] = full.translate_kv_loc(state["ids"])

    def store() -> None:
        for layer in range(LAYERS):
            pool.set_kv("full", layer, state["phys"], k, k)

    def free() -> None:
        full.free(keep)  # the lower allocation goes: the newer pages move down

    for _ in range(2):  # warm-up compiles every kernel
        alloc(), translate(), store(), full.free(state["ids"])
    for name, fn in (
        ("alloc", alloc),
        ("translate", translate),
        (f"set_kv x{LAYERS}", store),
        ("free (relocating)", free),
    ):
        kern, copies, names = _count(fn)
        out[name] = {"kernels": kern, "memcpys": copies, "names": sorted(set(names))}
    moved = pool.stats().pages_moved
    out["pages_moved_total"] = moved
    pool.check_invariants()
    return out


def host_times(page_size: int, iters: int = 2000) -> dict[str, float]:
    pool = _pool(page_size)
    full = pool.allocator("full")
    n = page_size
    res: dict[str, float] = {}
    ids = full.alloc(n)
    buf = torch.empty_like(ids)
    phys = full.translate_kv_loc(ids)
    k = torch.randn(n, 8, 128, device="cuda", dtype=torch.bfloat16)
    for label, fn in (
        ("alloc+free pair", lambda: full.free(full.alloc(n))),
        ("translate (out=)", lambda: full.translate_kv_loc(ids, out=buf)),
        ("set_kv, one layer", lambda: pool.set_kv("full", 0, phys, k, k)),
    ):
        res[label] = host_us_per_call(fn, iters, warmup=50)
    base = full.alloc(n)

    def reloc() -> None:
        x = full.alloc(2 * n)
        full.free(x[:n])
        full.free(x[n:])

    res["alloc 2 pages + relocating free + free"] = host_us_per_call(reloc, iters, warmup=50)
    full.free(base)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 0
    rows = [launches(ps) for ps in (1, 16)]
    times = {ps: host_times(ps) for ps in (1, 16)}
    lines = [
        "# ukv serving-step launches and host times (CUDA pool)",
        "",
        "- command: `python benches/bench_step_launches.py --out ...`",
        f"- machine: {torch.cuda.get_device_name()}, host {platform.node()}",
        f"- versions: torch {torch.__version__}, triton {__import__('triton').__version__}, Python {platform.python_version()}",
        f"- date: {utc_now()}",
        f"- model: full MHA {LAYERS} layers x 8 heads x 128 bf16 (down), Mamba state (up), 1 GiB pool, eager",
        "",
        "## Kernel launches per call (torch profiler, after warm-up)",
        "",
        "| page size | alloc | translate | set_kv (all layers) | free (relocating) | beyond the store |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, t, s, f = (
            r[k]["kernels"]
            for k in ("alloc", "translate", f"set_kv x{LAYERS}", "free (relocating)")
        )
        lines.append(
            f"| {r['page_size']} | {a} | {t} | {s} | {f} | {a + t + f} (alloc+free: {a + f}) |"
        )
    lines += ["", "## Host time per call (µs, perf_counter, synchronised at the end)", ""]
    lines += ["| page size | " + " | ".join(times[1]) + " |", "|---|" + "---|" * len(times[1])]
    for ps, t in times.items():
        lines.append(f"| {ps} | " + " | ".join(f"{v:.1f}" for v in t.values()) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    print(json.dumps(rows, indent=1))
    if args.out:
        write_results(Path(args.out), text, {"launches": rows, "host_us": times})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

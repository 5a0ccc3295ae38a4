"""import time, torch, ukv
SLEEP = 40_000_000
import sys
WARM = len(sys.argv) > 1
for ps in (1, 4):
    specs = [ukv.MHASpec("full", 2, 2, 64, torch.float32, grow="up"),
             ukv.MambaSpec("mamba", 1, ((8, 3),), torch.float32, (2, 4, 4), torch.float32, "down")]
    pool = ukv.UnifiedKVPool(16 << 20, specs, page_size=ps, device="cuda", lazy=False)
    fa = pool.allocator("full")
    if WARM:
        w = fa.alloc(2 * ps)
        pool.set_kv("full", 0, fa.translate_kv_loc(w), torch.zeros(w.numel(), 2, 64, device="cuda"), torch.zeros(w.numel(), 2, 64, device="cuda"))
        fa.free(w[:ps].cpu()); fa.free(w[ps:].cpu())
    finished = fa.alloc(32 * ps); survivor = fa.alloc(4 * ps); new = fa.alloc(16 * ps)
    phys = fa.translate_kv_loc(new)
    k = torch.full((new.numel(), 2, 64), 3.0, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream(); done = torch.cuda.Event()
    t0 = time.perf_counter(); T = lambda: f"{(time.perf_counter()-t0)*1e3:.1f}ms q={done.query()}"
    with torch.cuda.stream(side):
        torch.cuda._sleep(10 * SLEEP); print("sleep queued", T())
        for layer in range(2):
            pool.set_kv("full", layer, phys, k, k); print("set_kv", layer, T())
        done.record(side)
    print("recorded", T())
    pool.set_inflight_forward(done, new); print("reported", T())
    fa.free(finished); print("free queued", T())
    torch.cuda.current_stream().synchronize(); print("current synced", T())
    fa.free_group_begin(); fa.free_group_end(); print("group", T(), pool.stats().pages_moved)
    torch.cuda.synchronize(); print("all synced", T())
    ok = all(bool(torch.all(t == 3.0)) for t in pool.get_cpu_copy("full", new))
    print("ps", ps, "bytes ok", ok)
"""

from __future__ import annotations

import sys
import time

import torch

import ukv

SLEEP_CYCLES = 400_000_000  # about 200 ms on an H100


def run(page_size: int, warm: bool) -> None:
    specs = [
        ukv.MHASpec("full", 2, 2, 64, torch.float32, grow="up"),
        ukv.MambaSpec("mamba", 1, ((8, 3),), torch.float32, (2, 4, 4), torch.float32, "down"),
    ]
    pool = ukv.UnifiedKVPool(16 << 20, specs, page_size=page_size, device="cuda", lazy=False)
    fa = pool.allocator("full")
    if warm:
        w = fa.alloc(2 * page_size)
        zero = torch.zeros(w.numel(), 2, 64, device="cuda")
        pool.set_kv("full", 0, fa.translate_kv_loc(w), zero, zero)
        fa.free(w[:page_size].cpu())
        fa.free(w[page_size:].cpu())
    finished = fa.alloc(32 * page_size)
    fa.alloc(4 * page_size)  # a survivor between the freed pages and the new ones
    new = fa.alloc(16 * page_size)
    phys = fa.translate_kv_loc(new)
    k = torch.full((new.numel(), 2, 64), 3.0, device="cuda")
    torch.cuda.synchronize()
    side, done = torch.cuda.Stream(), torch.cuda.Event()
    t0 = time.perf_counter()

    def say(what: str) -> None:
        print(f"{what} {(time.perf_counter() - t0) * 1e3:.1f}ms q={done.query()}")

    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        say("sleep queued")
        for layer in range(2):
            pool.set_kv("full", layer, phys, k, k)
            say(f"set_kv {layer}")
        done.record(side)
    say("recorded")
    pool.set_inflight_forward(done, new)
    say("reported")
    fa.free(finished)
    say("free queued")
    torch.cuda.current_stream().synchronize()
    say("current synced")
    fa.free_group_begin()
    fa.free_group_end()
    say(f"group (pages moved so far: {pool.stats().pages_moved})")
    torch.cuda.synchronize()
    say("all synced")
    ok = all(bool(torch.all(t == 3.0)) for t in pool.get_cpu_copy("full", new))
    print("page size", page_size, "bytes ok", ok)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("needs CUDA")
        sys.exit(0)
    for ps in (1, 4):
        run(ps, warm=len(sys.argv) > 1)

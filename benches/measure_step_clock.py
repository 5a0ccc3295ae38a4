"""Measure the constants of the simulator's step clock (``ukv.sim.clock``) on this device.

    python benches/measure_step_clock.py --device cuda --out benches/results/step-clock-h100.json
    # (or -h200.json: the simulator reads the committed step-clock-<card>.json, h200 first)
    python benches/measure_step_clock.py --device cpu --quick --out /tmp/clock.json   # a smoke run

Measures, each at several sizes (median of timed repeats after warm-up):

* ``copy`` — ``Tensor.copy_`` of a contiguous buffer (bytes read + written per second);
* ``matmul`` — a bf16 ``[m, k] @ [k, n]`` from ``m = 1`` (it streams its weights) to
  ``m = 8192`` (FLOP-bound);
* ``decode_attention`` — one decode step of paged attention (a Triton kernel on CUDA: one
  program per request and KV head, online softmax over 16-token pages through a block
  table) at several batch sizes and context lengths; bytes = the K and V it reads;
* ``prefill_attention`` — causal ``scaled_dot_product_attention`` (flash on CUDA) at
  several lengths; FLOPs = ``4 * q_heads * head_dim * L * L / 2``;
* ``state_update`` — one Mamba-2 decode state update (a Triton kernel on CUDA:
  ``h = h * exp(dt * A) + dt * x B^T``, ``y = h C + D x``, fp32 state) at several batch
  sizes; bytes = the state read and written;
* ``launch`` — the per-kernel floor: back-to-back tiny kernels, eager and replayed from a
  CUDA graph (CPU: eager only, and the graph figure is the eager one).

Then fits the clock's constants (``ukv.sim.clock.fit``: one line ``t = a + x / rate`` per
kernel family) and writes one JSON: ``meta`` (device, torch / Triton / CUDA versions, date,
command), ``raw`` (every point), ``constants`` and ``fit`` (measured against predicted, per
point). The simulator's measured clock reads ``constants``. ``--device cpu`` uses the torch
reference implementations (``--impl triton`` runs the Triton kernels, under
``TRITON_INTERPRET=1`` on CPU); ``--quick`` takes tiny shapes (seconds).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import math
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("ukv") is None:
    # A source checkout without ukv installed: its package. (Never in front of an installed
    # ukv: tests import this file, and processes they spawn inherit sys.path.)
    sys.path.insert(0, str(ROOT / "python"))


def _import_clock() -> Any:
    """``ukv.sim.clock`` (its fit and schema). Where the ukv package cannot be imported
    (no compiled extension on this machine), its two pure-Python files are loaded alone:
    the measurement needs nothing else of ukv."""
    try:
        from ukv.sim import clock

        return clock
    except ImportError:
        import importlib.util
        import types

        pkg = types.ModuleType("ukv")
        pkg.__path__ = []  # a namespace stand-in: only the two modules below are loaded
        sys.modules.setdefault("ukv", pkg)
        for name in ("errors", "sim.clock"):
            path = ROOT / "python" / "ukv" / (name.replace(".", "/") + ".py")
            spec = importlib.util.spec_from_file_location(f"ukv.{name}", path)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            sys.modules[f"ukv.{name}"] = mod
            spec.loader.exec_module(mod)
        return sys.modules["ukv.sim.clock"]


simclock = _import_clock()

try:  # Triton is optional on CPU (the torch references stand in)
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover
    HAVE_TRITON = False


# ----- shapes --------------------------------------------------------------------------------

FULL = {
    "copy_bytes": [64 << 20, 256 << 20, 1 << 30],
    "matmul_kn": [(8192, 28672), (8192, 8192), (4096, 4096)],
    "matmul_m": [1, 8, 32, 128, 512, 2048, 8192],
    "attn": dict(q_heads=32, kv_heads=8, head_dim=128, page=16),
    "attn_batch": [1, 16, 64, 256],
    "attn_ctx": [1024, 8192, 32768, 131072],
    "attn_max_tokens": 4 << 20,
    "prefill_len": [1024, 4096, 16384],
    "state": dict(heads=128, head_dim=64, d_state=128, groups=8),
    "state_batch": [1, 16, 64, 256, 512],
    "launch_n": 2000,
    "repeat": 20,
    "warmup": 5,
}
QUICK = {
    "copy_bytes": [1 << 20, 4 << 20],
    "matmul_kn": [(256, 256)],
    "matmul_m": [1, 16, 256],
    "attn": dict(q_heads=4, kv_heads=2, head_dim=16, page=16),
    "attn_batch": [1, 4],
    "attn_ctx": [64, 256],
    "attn_max_tokens": 1 << 20,
    "prefill_len": [64, 128],
    "state": dict(heads=4, head_dim=16, d_state=16, groups=1),
    "state_batch": [1, 8],
    "launch_n": 200,
    "repeat": 5,
    "warmup": 1,
}


# ----- timing --------------------------------------------------------------------------------


TIMING = {"mode": "graph"}
"""How :func:`timed` times on CUDA: ``"graph"`` (the default) or ``"eager"`` (``--timing``)."""
GRAPH_INNER = 10
"""Graph replays between one pair of events (their launches overlap the work)."""
TIMED_WITH: dict[str, str] = {}
"""Per family, how its points were timed (``graph``, or ``eager`` where capture failed)."""


def timed(
    fn: Callable[[], object],
    device: str,
    repeat: int,
    warmup: int,
    family: str = "",
    eager: bool = False,
) -> float:
    """Median seconds of one call of ``fn``.

    On CUDA, by default ``fn`` is captured once in a CUDA graph and the graph replayed
    ``GRAPH_INNER`` times between two events: what a decode step runs (engines replay
    graphs), with the host's launch cost out of the window. Timed eagerly instead (the
    only way before 2026-12-06, and the fallback where capture fails), every repeat starts
    on an idle GPU after a synchronise, so the window also holds the host's time to launch
    ``fn``'s kernels (for the Triton decode attention, a device sync and six launches:
    the ~220 µs intercept of step-clock-h100.json, docs/SIMULATOR.md). ``eager``: always
    eagerly (the launch measurement)."""
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
        if TIMING["mode"] == "graph" and not eager:
            try:
                got = _timed_graph(fn, repeat)
                TIMED_WITH.setdefault(family, "graph")
                return got
            except Exception:  # not capturable: eager, and the JSON says so
                torch.cuda.synchronize()
                TIMED_WITH[family] = "eager (capture failed)"
        elif family:
            TIMED_WITH.setdefault(family, "eager")
        times = []
        for _ in range(repeat):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        return statistics.median(times)
    if family:
        TIMED_WITH.setdefault(family, "wall clock")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _timed_graph(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of one replay of ``fn`` captured as a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # capture wants its warm-up on a side stream
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(GRAPH_INNER):
            g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / GRAPH_INNER)
    del g
    return statistics.median(times)


# ----- Triton kernels (CUDA; under the interpreter on CPU) -----------------------------------

if HAVE_TRITON:

    @triton.jit
    def paged_decode_kernel(
        q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, mid_o_ptr, mid_lse_ptr,
        max_pages, pages_per_split, num_splits, scale,
        HKV: tl.constexpr, G: tl.constexpr, BG: tl.constexpr,
        D: tl.constexpr, PAGE: tl.constexpr, BN: tl.constexpr, DOT_F32: tl.constexpr,
    ):  # fmt: skip
        """One request, one KV head, one split of its pages: the ``G`` query heads of the
        KV head attend over ``BN`` tokens at a time (online softmax), and write their
        partial output and log-sum-exp for the reduction (split-K, as flash-decoding).
        ``DOT_F32``: multiply in fp32 (Triton's CPU interpreter gets bf16 ``tl.dot``
        wrong; on the GPU the dots take bf16 and accumulate in fp32)."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        sp = tl.program_id(2)
        offs_g = tl.arange(0, BG)
        offs_d = tl.arange(0, D)
        offs_t = tl.arange(0, BN)
        gmask = offs_g < G
        q_rows = (b * HKV * G + h * G + offs_g)[:, None] * D + offs_d[None, :]
        q = tl.load(q_ptr + q_rows, mask=gmask[:, None], other=0.0)
        seq = tl.load(lens_ptr + b)
        start = sp * pages_per_split * PAGE
        stop = tl.minimum(seq, start + pages_per_split * PAGE)
        m_i = tl.full([BG], -float("inf"), tl.float32)
        l_i = tl.zeros([BG], tl.float32)
        acc = tl.zeros([BG, D], tl.float32)
        for t0 in range(start, stop, BN):
            pos = t0 + offs_t
            valid = pos < stop
            page = tl.load(table_ptr + b * max_pages + pos // PAGE, mask=valid, other=0)
            tok = page.to(tl.int64) * PAGE + pos % PAGE
            rows = (tok * HKV + h)[:, None] * D + offs_d[None, :]
            k = tl.load(k_ptr + rows, mask=valid[:, None], other=0.0)
            v = tl.load(v_ptr + rows, mask=valid[:, None], other=0.0)
            if DOT_F32:
                s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32))) * scale
            else:
                s = tl.dot(q, tl.trans(k)) * scale
            s = tl.where(valid[None, :], s, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            if DOT_F32:
                acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        heads = b * HKV * G + h * G + offs_g
        o_rows = (heads * num_splits + sp)[:, None] * D + offs_d[None, :]
        tl.store(mid_o_ptr + o_rows, acc / l_i[:, None], mask=gmask[:, None])
        tl.store(mid_lse_ptr + heads * num_splits + sp, m_i + tl.log(l_i), mask=gmask)

    @triton.jit
    def mamba2_state_update_kernel(
        state_ptr, x_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, y_ptr,
        H: tl.constexpr, P: tl.constexpr, N: tl.constexpr, NG: tl.constexpr,
        BP: tl.constexpr,
    ):  # fmt: skip
        """One request, one head, ``BP`` rows of its ``[P, N]`` fp32 state."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        pb = tl.program_id(2)
        offs_p = pb * BP + tl.arange(0, BP)
        offs_n = tl.arange(0, N)
        pmask = offs_p < P
        g = h // (H // NG)
        base = ((b * H + h) * P + offs_p)[:, None] * N + offs_n[None, :]
        s = tl.load(state_ptr + base, mask=pmask[:, None], other=0.0)
        x = tl.load(x_ptr + (b * H + h) * P + offs_p, mask=pmask, other=0.0).to(tl.float32)
        dt = tl.load(dt_ptr + b * H + h).to(tl.float32)
        a = tl.load(a_ptr + h).to(tl.float32)
        bv = tl.load(b_ptr + (b * NG + g) * N + offs_n).to(tl.float32)
        cv = tl.load(c_ptr + (b * NG + g) * N + offs_n).to(tl.float32)
        dd = tl.load(d_ptr + h).to(tl.float32)
        s = s * tl.exp(dt * a) + (dt * x)[:, None] * bv[None, :]
        tl.store(state_ptr + base, s, mask=pmask[:, None])
        y = tl.sum(s * cv[None, :], axis=1) + dd * x
        tl.store(y_ptr + (b * H + h) * P + offs_p, y.to(y_ptr.dtype.element_ty), mask=pmask)


def paged_decode_triton(
    q, k_cache, v_cache, table, lens, out, page: int, ctx: int | None = None
) -> None:
    """Launch :func:`paged_decode_kernel` and reduce its splits: ``q``/``out`` ``[B, Hq, D]``,
    caches ``[pages * page, Hkv, D]``, ``table`` ``[B, max_pages]`` int32, ``lens`` ``[B]``
    (equal lengths in this bench). Splits: enough programs for two per SM. ``ctx``: the
    longest length, known to the caller as an engine knows it (None: read from ``lens``,
    a device sync, which a timed or captured call must not have)."""
    bsz, hq, d = q.shape
    hkv = k_cache.shape[1]
    g = hq // hkv
    ctx = int(lens.max()) if ctx is None else int(ctx)
    n_pages = -(-ctx // page)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
    want = max(1, -(-2 * sms // (bsz * hkv)))
    per = max(4, -(-n_pages // want))  # at least 4 pages (64 tokens) per split
    splits = -(-n_pages // per)
    mid_o = torch.empty(bsz, hq, splits, d, device=q.device, dtype=torch.float32)
    mid_lse = torch.empty(bsz, hq, splits, device=q.device, dtype=torch.float32)
    paged_decode_kernel[(bsz, hkv, splits)](
        q, k_cache, v_cache, table, lens, mid_o, mid_lse,
        table.shape[1], per, splits, 1.0 / math.sqrt(d),
        HKV=hkv, G=g, BG=max(16, triton.next_power_of_2(g)), D=d, PAGE=page, BN=64,
        DOT_F32=not q.is_cuda,
    )  # fmt: skip
    w = torch.softmax(mid_lse, dim=-1)
    out.copy_((w[..., None] * mid_o).sum(2).to(out.dtype))


def paged_decode_torch(
    q, k_cache, v_cache, table, lens, out, page: int, ctx: int | None = None
) -> None:
    """The torch reference: gather every request's pages, then attention (equal lengths)."""
    bsz, hq, d = q.shape
    hkv = k_cache.shape[1]
    ctx = int(lens[0]) if ctx is None else int(ctx)
    npg = -(-ctx // page)
    rows = table[:, :npg].long()[:, :, None] * page + torch.arange(page, device=q.device)
    rows = rows.reshape(bsz, -1)[:, :ctx]
    k = k_cache[rows].float()  # [B, L, Hkv, D]
    v = v_cache[rows].float()
    g = hq // hkv
    qf = q.float().reshape(bsz, hkv, g, d)
    s = torch.einsum("bhgd,blhd->bhgl", qf, k) / math.sqrt(d)
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("bhgl,blhd->bhgd", p, v)
    out.copy_(o.reshape(bsz, hq, d).to(out.dtype))


def state_update_triton(state, x, dt, a, bm, cm, dd, y) -> None:
    """Launch :func:`mamba2_state_update_kernel` (``state`` ``[B, H, P, N]`` fp32)."""
    bsz, h, p, n = state.shape
    ng = bm.shape[1]
    bp = min(32, triton.next_power_of_2(p))
    mamba2_state_update_kernel[(bsz, h, triton.cdiv(p, bp))](
        state, x, dt, a, bm, cm, dd, y, H=h, P=p, N=n, NG=ng, BP=bp
    )


def state_update_torch(state, x, dt, a, bm, cm, dd, y) -> None:
    """The torch reference of one Mamba-2 decode state update."""
    bsz, h, p, n = state.shape
    ng = bm.shape[1]
    rep = h // ng
    bh = bm.float().repeat_interleave(rep, dim=1)  # [B, H, N]
    ch = cm.float().repeat_interleave(rep, dim=1)
    dtf = dt.float()
    decay = torch.exp(dtf * a.float()[None, :])  # [B, H]
    state.mul_(decay[:, :, None, None]).add_(
        (dtf[:, :, None] * x.float())[:, :, :, None] * bh[:, :, None, :]
    )
    yy = (state * ch[:, :, None, :]).sum(-1) + dd.float()[None, :, None] * x.float()
    y.copy_(yy.to(y.dtype))


# ----- the measurements ----------------------------------------------------------------------


def measure_copy(cfg: dict, dev: str) -> list[dict]:
    out = []
    for nbytes in cfg["copy_bytes"]:
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        s = timed(functools.partial(dst.copy_, src), dev, cfg["repeat"], cfg["warmup"], "copy")
        out.append({"bytes": 2 * nbytes, "s": s})
        del src, dst
    return out


def measure_matmul(cfg: dict, dev: str) -> list[dict]:
    out = []
    for k, n in cfg["matmul_kn"]:
        w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        for m in cfg["matmul_m"]:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            mm = functools.partial(torch.matmul, x, w)
            s = timed(mm, dev, cfg["repeat"], cfg["warmup"], "matmul")
            out.append({"m": m, "k": k, "n": n, "s": s})
    return out


def attn_inputs(cfg: dict, bsz: int, ctx: int, dev: str, seed: int = 0) -> tuple:
    """A paged cache with ``bsz`` requests of ``ctx`` tokens, pages scattered at random."""
    a = cfg["attn"]
    page, hkv, hq, d = a["page"], a["kv_heads"], a["q_heads"], a["head_dim"]
    npg = -(-ctx // page)
    total = bsz * npg
    gen = torch.Generator(device="cpu").manual_seed(seed)
    perm = torch.randperm(total, generator=gen).to(torch.int32).reshape(bsz, npg).to(dev)
    k_cache = torch.randn(total * page, hkv, d, device=dev, dtype=torch.bfloat16)
    v_cache = torch.randn(total * page, hkv, d, device=dev, dtype=torch.bfloat16)
    q = torch.randn(bsz, hq, d, device=dev, dtype=torch.bfloat16)
    lens = torch.full((bsz,), ctx, dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    return q, k_cache, v_cache, perm, lens, out


def measure_decode_attention(cfg: dict, dev: str, impl: str) -> list[dict]:
    a = cfg["attn"]
    fn = paged_decode_triton if impl == "triton" else paged_decode_torch
    out = []
    for bsz in cfg["attn_batch"]:
        for ctx in cfg["attn_ctx"]:
            if bsz * ctx > cfg["attn_max_tokens"]:
                continue
            q, kc, vc, table, lens, o = attn_inputs(cfg, bsz, ctx, dev)
            call = functools.partial(fn, q, kc, vc, table, lens, o, a["page"], ctx)
            s = timed(call, dev, cfg["repeat"], cfg["warmup"], "decode_attention")
            kv_bytes = 2 * bsz * ctx * a["kv_heads"] * a["head_dim"] * 2
            out.append({"batch": bsz, "context": ctx, "bytes": kv_bytes, "s": s, **a})
            del q, kc, vc, table, lens, o
    return out


def measure_prefill_attention(cfg: dict, dev: str) -> list[dict]:
    a = cfg["attn"]
    hq, hkv, d = a["q_heads"], a["kv_heads"], a["head_dim"]
    out = []
    for length in cfg["prefill_len"]:
        q = torch.randn(1, hq, length, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, hkv, length, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, hkv, length, d, device=dev, dtype=torch.bfloat16)
        k, v = (t.repeat_interleave(hq // hkv, dim=1) for t in (k, v))
        sdpa = functools.partial(
            torch.nn.functional.scaled_dot_product_attention, q, k, v, is_causal=True
        )
        s = timed(sdpa, dev, cfg["repeat"], cfg["warmup"], "prefill_attention")
        flops = 4.0 * hq * d * length * length / 2.0
        out.append({"tokens": length, "q_heads": hq, "head_dim": d, "flops": flops, "s": s})
    return out


def state_inputs(cfg: dict, bsz: int, dev: str) -> tuple:
    st = cfg["state"]
    h, p, n, ng = st["heads"], st["head_dim"], st["d_state"], st["groups"]
    state = torch.randn(bsz, h, p, n, device=dev, dtype=torch.float32) * 0.1
    x = torch.randn(bsz, h, p, device=dev, dtype=torch.bfloat16)
    dt = torch.rand(bsz, h, device=dev, dtype=torch.float32) * 0.1
    a = -torch.rand(h, device=dev, dtype=torch.float32)
    bm = torch.randn(bsz, ng, n, device=dev, dtype=torch.bfloat16)
    cm = torch.randn(bsz, ng, n, device=dev, dtype=torch.bfloat16)
    dd = torch.randn(h, device=dev, dtype=torch.float32)
    y = torch.empty(bsz, h, p, device=dev, dtype=torch.bfloat16)
    return state, x, dt, a, bm, cm, dd, y


def measure_state_update(cfg: dict, dev: str, impl: str) -> list[dict]:
    st = cfg["state"]
    fn = state_update_triton if impl == "triton" else state_update_torch
    out = []
    for bsz in cfg["state_batch"]:
        args = state_inputs(cfg, bsz, dev)
        s = timed(functools.partial(fn, *args), dev, cfg["repeat"], cfg["warmup"], "state_update")
        state_bytes = bsz * st["heads"] * st["head_dim"] * st["d_state"] * 4
        out.append({"batch": bsz, "bytes": 2 * state_bytes, "s": s, **st})
        del args
    return out


def measure_launch(cfg: dict, dev: str) -> dict:
    x = torch.zeros(1, device=dev)
    n = cfg["launch_n"]

    def burst() -> None:
        for _ in range(n):
            x.add_(1)

    eager = timed(burst, dev, max(3, cfg["repeat"] // 4), 1, eager=True) / n
    graph = eager
    if dev == "cuda":
        g = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            burst()
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(g):
            burst()
        graph = timed(g.replay, dev, max(3, cfg["repeat"] // 4), 1, eager=True) / n
    return {"eager_s": eager, "graph_s": graph, "kernels": n}


def check_kernels(dev: str) -> dict:
    """The Triton kernels against the torch references on a small case (max abs error)."""
    cfg = QUICK
    q, kc, vc, table, lens, o1 = attn_inputs(cfg, 3, 300, dev, seed=1)  # several splits
    o2 = torch.empty_like(o1)
    paged_decode_triton(q, kc, vc, table, lens, o1, cfg["attn"]["page"])
    paged_decode_torch(q, kc, vc, table, lens, o2, cfg["attn"]["page"])
    args1 = state_inputs(cfg, 3, dev)
    args2 = tuple(t.clone() for t in args1)
    state_update_triton(*args1)
    state_update_torch(*args2)
    return {
        "decode_attention_max_abs_err": float((o1.float() - o2.float()).abs().max()),
        "state_update_max_abs_err": float((args1[0] - args2[0]).abs().max()),
    }


def versions() -> dict:
    return {
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", "?") if HAVE_TRITON else None,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }


def run(device: str, quick: bool, impl: str | None, argv: list[str]) -> dict:
    """All the measurements, the fit and the metadata as one JSON-ready dict."""
    cfg = QUICK if quick else FULL
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("measure_step_clock.py: --device cuda but no CUDA device here")
    impl = impl or ("triton" if device == "cuda" and HAVE_TRITON else "torch")
    name = torch.cuda.get_device_name() if device == "cuda" else (
        f"cpu ({platform.machine()}, {platform.processor() or platform.system()})")  # fmt: skip
    errors: dict[str, str] = {}
    impls: dict[str, str] = {}
    raw: dict = {}

    def attempt(key: str, fn: Callable[[], object], fallback: Callable[[], object] | None = None):
        t0 = time.perf_counter()
        try:
            raw[key] = fn()
            impls.setdefault(key, impl if key in ("decode_attention", "state_update") else "torch")
        except Exception:  # the failure is recorded; a fallback may still measure
            errors[key] = traceback.format_exc(limit=3)
            if fallback is None:
                raise
            raw[key] = fallback()
            impls[key] = "torch (fallback)"
        print(f"{key:<18} {time.perf_counter() - t0:6.1f} s", file=sys.stderr)

    attempt("copy", lambda: measure_copy(cfg, device))
    attempt("matmul", lambda: measure_matmul(cfg, device))
    attempt("decode_attention", lambda: measure_decode_attention(cfg, device, impl),
            (lambda: measure_decode_attention(cfg, device, "torch")) if impl == "triton" else None)  # fmt: skip
    attempt("prefill_attention", lambda: measure_prefill_attention(cfg, device))
    attempt("state_update", lambda: measure_state_update(cfg, device, impl),
            (lambda: measure_state_update(cfg, device, "torch")) if impl == "triton" else None)  # fmt: skip
    attempt("launch", lambda: measure_launch(cfg, device))
    kernel_check = None
    if impl == "triton":
        try:
            kernel_check = check_kernels(device)
        except Exception:
            errors["kernel_check"] = traceback.format_exc(limit=3)
    constants, fitted = simclock.fit(raw)
    return {
        "schema": simclock.SCHEMA,
        "meta": {
            "device": name,
            "versions": versions(),
            "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
            "command": "python " + " ".join(["benches/measure_step_clock.py", *argv]),
            "quick": quick,
            "impl": impls,
            "timing": dict(TIMED_WITH),
            "graph_replays_per_event_pair": GRAPH_INNER,
            "shapes": {k: v for k, v in cfg.items() if k not in ("repeat", "warmup")},
            "repeat": cfg["repeat"],
            "warmup": cfg["warmup"],
            "kernel_check": kernel_check,
            "errors": errors,
            "step_model": {
                "mm_per_layer": simclock.MM_PER_LAYER,
                "other_per_layer": simclock.OTHER_PER_LAYER,
            },
        },
        "raw": raw,
        "constants": constants,
        "fit": fitted,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--quick", action="store_true", help="tiny shapes (a smoke run)")
    p.add_argument("--impl", choices=("triton", "torch"),
                   help="decode-attention and state-update kernels (default: triton on "
                   "CUDA, torch on CPU)")  # fmt: skip
    p.add_argument("--out", default=simclock.STEP_CLOCK_JSON)
    p.add_argument("--timing", choices=("graph", "eager"), default="graph",
                   help="CUDA: replay each call from a CUDA graph (default), or time it "
                   "eagerly, host launch cost included (how step-clock-h100.json of "
                   "2026-12-05 was timed)")  # fmt: skip
    a = p.parse_args(argv)
    TIMING["mode"] = a.timing
    data = run(a.device, a.quick, a.impl, argv)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    c = data["constants"]
    print(
        f"{data['meta']['device']}: copy {c['copy_bw'] / 1e12:.2f} TB/s, weights "
        f"{c['weight_bw'] / 1e12:.2f} TB/s, matmul {c['matmul_flops'] / 1e12:.0f} TFLOP/s, "
        f"decode attention {c['attn_bw'] / 1e12:.2f} TB/s, prefill attention "
        f"{c['prefill_attn_flops'] / 1e12:.0f} TFLOP/s, state {c['state_bw'] / 1e12:.2f} TB/s, "
        f"launch {c['launch_s'] * 1e6:.1f} us (graph) / {c['launch_eager_s'] * 1e6:.1f} us; "
        f"wrote {out}"
    )
    for fam, v in data["fit"].items():
        if isinstance(v, dict) and v.get("median_rel_err") is not None:
            print(f"  fit {fam:<18} median rel err {v['median_rel_err']:.1%}, "
                  f"max {v['max_rel_err']:.1%}")  # fmt: skip
    if data["meta"]["errors"]:
        print(f"  errors (see the JSON): {', '.join(data['meta']['errors'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

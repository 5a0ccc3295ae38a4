"""Regression gate of the host path: two builds of ukv timed on one device, in one run.

Does a change slow down the host side of the pool's calls? Two wheels (built by
``benches/regress_build.sh``: an earlier commit, "old", and the current tree, "new") are
installed into separate temporary directories (``pip install --no-deps --target``). One
child process per build imports its own ukv (two builds of one module cannot share a
process) and builds every row; the parent then alternates them row by row, old/new then
new/old, so each row's old and new rounds are seconds apart and a slow stretch of the host
hits both. Each round of a row is bracketed by rounds of a control that does not use ukv
(``dst[idx] = src``, 256 int64 ids, torch on the same device, in the same process), and the
figure compared is the row's time divided by its control's: a host that drifts (a torch
row moved from 18 to 29 µs within one GPU call once) moves both and cancels out.

Rows (page sizes 1 and 16): alloc+free of one page with host ids and with device ids; a
relocating free (alloc 1 page + free a random one of 1024 live: one page moves) with host
and with device ids; ``translate_kv_loc`` of 256 ids (``out=``); ``set_kv`` of 64 tokens x 8
heads x 128 bf16; alloc 4096 pages + free them all, eager and lazy, device ids. The op
traces, pools, checks and the timed round (synchronize, n ops, synchronize,
``pool.sync_frees()``) are ``bench_cuda_host.py``'s; every row validates (byte markers
follow their ids) in a warm-up before it is timed. ``--processes`` fresh pairs of children
run one after another (a process's memory layout is part of the noise; their spread shows
it). Figures are per-op means of a round; per row the median over all rounds.

Verdict per row, from the per-round normalised ratios new/old: ``slower`` when their median
is at least 1 + ``--threshold`` and their first quartile above 1; ``faster`` when the median
is at most 1 - threshold and the third quartile below 1; otherwise ``same`` (within noise).

Usage (repository root; the wheels from ``bash benches/regress_build.sh OLD_COMMIT``)::

    python3 benches/regress_run.py --wheels .gpu/regress --out OUT_DIR   # GPU: ~3 min
    python3 benches/regress_run.py --wheels .gpu/regress --device cpu --quick   # smoke run
    python3 benches/regress_run.py --wheels .gpu/regress --aa   # old against itself: noise

writes ``OUT_DIR/regress-<card>.md`` and ``.json`` (``regress-cpu.*`` with ``--device cpu``),
rewritten after every round, so a run cut short keeps what it measured (the title says
PARTIAL). Needs Python, torch (and Triton on CUDA) and pip; no Rust, no network.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from harness import Config, calibrate, fmt_us, sh, utc_now, write_results  # noqa: E402

CONTROL = "control"
CONTROL_IDS = 256
CONTROL_TABLE = 1 << 16
SEED = 20261205


@dataclass(frozen=True)
class RowSpec:
    """One timed row: an op (``kind``) at one page size and mode, with host or device ids."""

    kind: str  # pair | reloc | batch | translate | set_kv
    page_size: int
    mode: str = "eager"
    ids: str = "device"  # device | host

    @property
    def name(self) -> str:
        return f"{self.kind}/ps{self.page_size}/{self.mode}/{self.ids}"

    @property
    def what(self) -> str:
        ids = {"host": "host ids", "device": "device ids"}[self.ids]
        return {
            "pair": f"alloc(1 page) + free, {ids}",
            "reloc": f"relocating free: alloc 1 page + free 1 of 1024 live, {ids}",
            "batch": f"alloc 4096 pages + free them all, {ids}",
            "translate": "translate_kv_loc, 256 ids (out=)",
            "set_kv": "set_kv one layer, 64 tokens x 8 x 128 bf16",
        }[self.kind]


ROWS = [
    *(
        RowSpec(k, ps, "eager", ids)
        for k in ("pair", "reloc")
        for ps in (1, 16)
        for ids in ("host", "device")
    ),
    *(RowSpec("translate", ps) for ps in (1, 16)),
    *(RowSpec("set_kv", ps) for ps in (1, 16)),
    *(RowSpec("batch", ps, mode) for mode in ("eager", "lazy") for ps in (1, 16)),
]


# ----- the child: one ukv build, every row ------------------------------------------------


class Control:
    """The normaliser: ``dst[idx] = src`` for 256 int64 ids in torch on the device (host
    time is torch's dispatch and launch, the same machinery ukv's calls go through)."""

    def __init__(self, device: str) -> None:
        import torch

        gen = torch.Generator().manual_seed(SEED)
        self.dst = torch.zeros(CONTROL_TABLE, dtype=torch.int64, device=device)
        self.idx = torch.randperm(CONTROL_TABLE, generator=gen)[:CONTROL_IDS].to(device)
        self.src = torch.arange(CONTROL_IDS, dtype=torch.int64, device=device)

    def settle(self) -> None:
        pass

    def run(self, n: int, check: bool) -> None:
        dst, idx, src = self.dst, self.idx, self.src
        for _ in range(n):
            dst[idx] = src
        if check and not bool((dst[idx] == src).all()):
            raise AssertionError("control: the scatter wrote other values")


def build_row(spec: RowSpec, dev: Any) -> tuple[Any, Any]:
    """(variant, run) of ``bench_cuda_host`` for one row; raises where this build lacks
    what the row needs (``alloc(n, host=True)``)."""
    import bench_cuda_host as bch
    from sides import UkvSide

    if spec.kind == "set_kv":
        store = bch.SetKv(dev, spec.page_size)
        v = store.variants()[0]
        return v, store.build(v)
    side = UkvSide(spec.page_size, spec.mode == "lazy", dev.name)
    if spec.ids == "host":
        if side.alloc_host is None:
            raise RuntimeError("this ukv build has no alloc(n, host=True)")
        v = bch.Variant(bch.UKV_HOST, side, side.alloc_host, side.free)
    else:
        v = bch.Variant(bch.UKV_DEV, side, side.alloc, side.free)
    trace = {
        "pair": bch.trace_pair,
        "reloc": bch.trace_reloc,
        "batch": bch.trace_batch,
        "translate": bch.trace_translate(True),
    }[spec.kind]
    return v, trace(v)


def child_env(device: str) -> dict[str, Any]:
    """What this child runs with: ukv's location and native build, torch, the device."""
    import datetime
    import platform

    import torch

    import ukv

    so = sorted(Path(ukv.__file__).parent.glob("_core*.so"))
    built = (
        datetime.datetime.fromtimestamp(so[0].stat().st_mtime, datetime.UTC).isoformat(
            timespec="seconds"
        )
        if so
        else "?"
    )
    env = {
        "ukv_file": ukv.__file__,
        "ukv_native_built": built,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pid": os.getpid(),
    }
    if device == "cuda":
        import triton

        env["cuda"] = torch.version.cuda
        env["triton"] = triton.__version__
        env["card"] = torch.cuda.get_device_name()
    return env


def child_main(device: str, rows: list[str], warm_iters: int) -> int:
    """Serve the parent: ``setup`` builds and validates every row, ``time`` times one row
    bracketed by the control, ``quit`` ends. One JSON line in, one out."""
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # anything else printed goes to stderr, not into the protocol
    reply: IO[str] = os.fdopen(reply_fd, "w", buffering=1)

    import bench_cuda_host as bch
    import torch
    from harness import freeze_gc

    torch.set_num_threads(1)
    dev = bch.Device(device)
    specs = {s.name: s for s in ROWS}
    built: dict[str, tuple[Any, Any]] = {}
    control = Control(device)
    control_variant = bch.Variant(CONTROL, control, bch._no_alloc, bch._no_free)

    def timed(name: str, n: int) -> float:
        v, run = (control_variant, control.run) if name == CONTROL else built[name]
        return bch.timed_round(dev, v, run, n)[0]

    def setup() -> dict[str, Any]:
        per_op: dict[str, float] = {}
        errors: dict[str, str] = {}
        for name in [CONTROL, *rows]:
            try:
                if name != CONTROL:
                    built[name] = build_row(specs[name], dev)
                v, run = (control_variant, control.run) if name == CONTROL else built[name]
                run(warm_iters, True)  # validates: markers follow their ids through moves
                v.settle()
                per_op[name] = timed(name, warm_iters) / warm_iters
            except Exception as exc:  # noqa: BLE001 - the row is reported with its error
                traceback.print_exc()
                built.pop(name, None)
                errors[name] = (
                    f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                )
        freeze_gc()
        return {"env": child_env(device), "per_op": per_op, "errors": errors}

    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "setup":
            out: dict[str, Any] = setup()
        elif msg["cmd"] == "time":
            name, n, nc = msg["row"], msg["n"], msg["nc"]
            try:
                c0 = timed(CONTROL, nc)
                t = timed(name, n)
                c1 = timed(CONTROL, nc)
                out = {"us": t / n * 1e6, "ctl_us": (c0 + c1) / (2 * nc) * 1e6}
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                out = {"error": f"{type(exc).__name__}: {exc}"}
        else:
            return 0
        reply.write(json.dumps(out) + "\n")
    return 0


# ----- the parent: install, alternate, summarise ------------------------------------------


def install(wheel: Path, target: Path) -> None:
    """``pip install --no-deps --target`` of one wheel (no network: a local file)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        "--disable-pip-version-check",
        "--target",
        str(target),
        str(wheel),
    ]
    # PIP_ROOT_USER_ACTION: no warning about root (an unknown variable to an older pip).
    subprocess.run(cmd, check=True, env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"})


def python_path(install_dir: Path) -> str:
    """The child's PYTHONPATH: its wheel, then the caller's entries that hold no ``ukv``
    (a source checkout on PYTHONPATH must not shadow the installed build)."""
    keep = [
        p
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if p and not (Path(p) / "ukv").exists()
    ]
    return os.pathsep.join([str(install_dir), *keep])


class Child:
    """One child process with one ukv build; requests and replies are JSON lines."""

    def __init__(
        self, side: str, install_dir: Path, args: argparse.Namespace, rows: list[str]
    ) -> None:
        self.side = side
        self.install_dir = install_dir
        env = {**os.environ, "PYTHONPATH": python_path(install_dir), "PYTHONUNBUFFERED": "1"}
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "--device",
            args.device,
            "--warm-iters",
            str(args.warm_iters),
            "--child-rows",
            ",".join(rows),
        ]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, bufsize=1
        )

    def ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.side} child exited (status {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.ask({"cmd": "quit"})
        except Exception:  # noqa: BLE001 - it may be gone already
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def verdict(ratios: list[float], threshold: float) -> str:
    if not ratios:
        return "—"
    q1, med, q3 = quartiles(ratios)
    if med >= 1 + threshold and q1 > 1:
        return "**slower**"
    if med <= 1 - threshold and q3 < 1:
        return "faster"
    return "same"


def summarise(
    rows: list[str], samples: dict[str, list[dict[str, Any]]], threshold: float
) -> list[dict[str, Any]]:
    """Per row: medians of old and new µs and controls, and the per-round ratios."""
    out = []
    for name in rows:
        pairs = [s for s in samples.get(name, []) if "old" in s and "new" in s]
        raw = [p["new"]["us"] / p["old"]["us"] for p in pairs]
        norm = [
            (p["new"]["us"] / p["new"]["ctl_us"]) / (p["old"]["us"] / p["old"]["ctl_us"])
            for p in pairs
        ]
        ctl = [p["new"]["ctl_us"] / p["old"]["ctl_us"] for p in pairs]
        out.append(
            {
                "row": name,
                "pairs": len(pairs),
                "old_us": _median(pairs, "old", "us"),
                "new_us": _median(pairs, "new", "us"),
                "old_ctl_us": _median(pairs, "old", "ctl_us"),
                "new_ctl_us": _median(pairs, "new", "ctl_us"),
                "raw_ratio": quartiles(raw) if raw else None,
                "norm_ratio": quartiles(norm) if norm else None,
                "norm_min_max": (min(norm), max(norm)) if norm else None,
                "ctl_ratio": quartiles(ctl) if ctl else None,
                "verdict": verdict(norm, threshold),
            }
        )
    return out


def _median(pairs: list[dict[str, Any]], side: str, key: str) -> float | None:
    return statistics.median(p[side][key] for p in pairs) if pairs else None


def slug(card: str) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``h100``; the CPU → ``cpu``."""
    m = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", card)
    return m.group(1).lower() if m else re.sub(r"[^a-z0-9]+", "-", card.lower()).strip("-")


def markdown(
    meta: dict[str, Any], summary: list[dict[str, Any]], errors: dict[str, dict[str, str]]
) -> str:
    title = "ukv host-path regression gate: new vs old build on one device"
    if not meta["complete"]:
        title += " (PARTIAL: the run had not finished when this was written)"
    o, n = meta["manifest"]["old"], meta["manifest"]["new"]
    lines = [
        f"# {title}",
        "",
        f"- command: `{meta['command']}`",
        f"- card: {meta['card']}; host: {meta['host']}",
        f"- versions: {meta['versions']}",
        f"- old: `{o['describe']}` ({o['wheel']}, sha256 {o['sha256'][:16]})",
        f"- new: `{n['describe']}`"
        + (f" (uncommitted diff {n.get('diff_sha256_16')})" if n.get("uncommitted_changes") else "")
        + f" ({n['wheel']}, sha256 {n['sha256'][:16]})",
        f"- date: {meta['date']} (run took {meta['wall_s']:.0f} s); wheels built {meta['manifest']['built']}",
        f"- method: {meta['processes']} pair(s) of child processes, one per build, one pair "
        f"after the other; per pair {meta['rounds']} rounds of every row, old and new "
        "alternating row by row (old/new, then new/old); a round is `synchronize`, n ops, "
        "`synchronize`, `pool.sync_frees()`, GC off, n the same for both builds (about "
        f"{meta['round_s']} s of the old build); each round bracketed by two rounds of the "
        f"control (`dst[idx] = src`, {CONTROL_IDS} int64 ids, torch, same device and "
        "process). µs: median over rounds of the per-op mean. normalised = (new / its "
        "control) / (old / its control), per pair of rounds; shown as median [quartiles] "
        f"(min–max). Verdict: slower when the median ≥ {1 + meta['threshold']:.2f} and the "
        f"first quartile > 1; faster when the median ≤ {1 - meta['threshold']:.2f} and the "
        "third quartile < 1; else same.",
    ]
    if meta.get("aa"):
        lines.append("- A/A run (`--aa`): both sides are the OLD wheel; every ratio is noise.")
    lines += [
        "",
        "| row | what | page size | mode | old µs | new µs | new/old raw | new/old normalised | "
        "control new/old | rounds | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    specs = {s.name: s for s in ROWS}
    for r in summary:
        s = specs[r["row"]]
        errs = "; ".join(f"{side}: {e[r['row']]}" for side, e in errors.items() if r["row"] in e)
        if r["norm_ratio"] is None:
            lines.append(
                f"| `{s.name}` | {s.what} | {s.page_size} | {s.mode} | — | — | — | — | — | 0 | "
                f"{'error: ' + errs if errs else '—'} |"
            )
            continue
        q1, med, q3 = r["norm_ratio"]
        lo, hi = r["norm_min_max"]
        lines.append(
            f"| `{s.name}` | {s.what} | {s.page_size} | {s.mode} | {fmt_us(r['old_us'])} | "
            f"{fmt_us(r['new_us'])} | {r['raw_ratio'][1]:.3f} | {med:.3f} [{q1:.3f}, {q3:.3f}] "
            f"({lo:.3f}–{hi:.3f}) | {r['ctl_ratio'][1]:.3f} | {r['pairs']} | {r['verdict']} |"
        )
    ctl_old = [r["old_ctl_us"] for r in summary if r["old_ctl_us"]]
    ctl_new = [r["new_ctl_us"] for r in summary if r["new_ctl_us"]]
    if ctl_old:
        lines += [
            "",
            f"Control (`dst[idx] = src`, {CONTROL_IDS} ids): median µs per call over all rows' rounds "
            f"old {fmt_us(statistics.median(ctl_old))}, new {fmt_us(statistics.median(ctl_new))} "
            f"(range of the per-row medians: old {fmt_us(min(ctl_old))}–{fmt_us(max(ctl_old))}, "
            f"new {fmt_us(min(ctl_new))}–{fmt_us(max(ctl_new))}). A control new/old far from 1 "
            "means the two processes ran at different speeds; normalisation corrects that.",
        ]
    if meta["notes"]:
        lines += ["", "Notes:", "", *[f"- {x}" for x in meta["notes"]]]
    lines.append("")
    return "\n".join(lines)


def run_parent(args: argparse.Namespace, argv: list[str]) -> int:
    t_start = time.perf_counter()
    wheels = args.wheels.resolve()
    manifest = json.loads((wheels / "manifest.json").read_text())
    rows = [s.name for s in ROWS if re.search(args.rows, s.name)]
    if not rows:
        print(f"no row matches {args.rows!r}; rows: {', '.join(s.name for s in ROWS)}")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ukv-regress-"))
    dirs = {}
    for side in ("old", "new"):
        src = "old" if args.aa else side
        dirs[side] = tmp / side
        install(wheels / manifest[src]["wheel"], dirs[side])
        print(f"{side}: {manifest[src]['describe']} installed into {dirs[side]}", flush=True)
    cfg = Config(
        rounds=args.rounds,
        round_s=args.round_s,
        warm_iters=args.warm_iters,
        min_iters=args.min_iters,
        max_iters=args.max_iters,
    )
    card = (
        sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
        if args.device == "cuda"
        else "none (--device cpu: a smoke run of the code paths, not a result)"
    )
    meta: dict[str, Any] = {
        "command": " ".join(["python3 benches/regress_run.py", *argv]),
        "device": args.device,
        "card": card,
        "host": f"{os.cpu_count()} CPUs ({_cpu_model()})",
        "date": utc_now(),
        "manifest": manifest,
        "processes": args.processes,
        "rounds": args.rounds,
        "round_s": args.round_s,
        "threshold": args.threshold,
        "aa": args.aa,
        "rows": rows,
        "versions": "?",
        "notes": [],
        "complete": False,
    }
    samples: dict[str, list[dict[str, Any]]] = {r: [] for r in rows}
    errors: dict[str, dict[str, str]] = {"old": {}, "new": {}}
    envs: list[dict[str, Any]] = []
    out_md: Path | None = None

    def write() -> str:
        meta["wall_s"] = time.perf_counter() - t_start
        summary = summarise(rows, samples, args.threshold)
        text = markdown(meta, summary, errors)
        if args.out is not None:
            nonlocal out_md
            name = "cpu" if args.device == "cpu" else slug(meta.get("card_name", card))
            out_md = args.out / f"regress-{name}{'-aa' if args.aa else ''}.md"
            write_results(
                out_md,
                text,
                {
                    **meta,
                    "summary": summary,
                    "errors": errors,
                    "children": envs,
                    "samples": samples,
                },
            )
        return text

    for gen in range(args.processes):
        children = {side: Child(side, dirs[side], args, rows) for side in ("old", "new")}
        try:
            per_op: dict[str, dict[str, float]] = {}
            for side, child in children.items():
                rep = child.ask({"cmd": "setup"})
                envs.append({"side": side, "process": gen, **rep["env"]})
                if not str(rep["env"]["ukv_file"]).startswith(str(dirs[side])):
                    raise RuntimeError(
                        f"the {side} child imported ukv from {rep['env']['ukv_file']}, not {dirs[side]}"
                    )
                per_op[side] = rep["per_op"]
                errors[side].update(rep["errors"])
            meta["card_name"] = envs[0].get("card", card)
            meta["versions"] = _versions(envs[0])
            live = [r for r in rows if r in per_op["old"] and r in per_op["new"]]
            iters = {r: calibrate(cfg, per_op["old"][r]) for r in live}
            nc = calibrate(
                Config(1, args.round_s / 4, 1, cfg.min_iters, cfg.max_iters), per_op["old"][CONTROL]
            )
            for rnd in range(args.rounds):
                for k, name in enumerate(live):
                    order = ("old", "new") if (rnd + k) % 2 == 0 else ("new", "old")
                    pair: dict[str, Any] = {
                        "process": gen,
                        "round": rnd,
                        "n": iters[name],
                        "first": order[0],
                    }
                    for side in order:
                        rep = children[side].ask(
                            {"cmd": "time", "row": name, "n": iters[name], "nc": nc}
                        )
                        if "error" in rep:
                            errors[side][name] = rep["error"]
                        else:
                            pair[side] = rep
                    samples[name].append(pair)
                write()
                print(
                    f"[{time.perf_counter() - t_start:6.1f}s] process pair {gen + 1}/{args.processes}, "
                    f"round {rnd + 1}/{args.rounds} done",
                    flush=True,
                )
        finally:
            for child in children.values():
                child.close()
    meta["complete"] = True
    text = write()
    print()
    print(text)
    if out_md is not None:
        print(f"wrote {out_md} and {out_md.with_suffix('.json').name}")
    return 0


def _cpu_model() -> str:
    for line in sh(["lscpu"]).splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def _versions(env: dict[str, Any]) -> str:
    parts = [f"Python {env['python']}", f"torch {env['torch']} (1 CPU thread)"]
    if "cuda" in env:
        parts += [f"CUDA {env['cuda']}", f"triton {env['triton']}"]
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--wheels",
        type=Path,
        default=Path(".gpu/regress"),
        help="folder of regress_build.sh: old/, new/, manifest.json",
    )
    p.add_argument("--out", type=Path, help="directory for regress-<card>.md and .json")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--rows", default=".", help="regex over row names (kind/psN/mode/ids)")
    p.add_argument("--processes", type=int, default=3, help="pairs of child processes, in turn")
    p.add_argument("--rounds", type=int, default=12, help="rounds per row per process pair")
    p.add_argument("--round-s", type=float, default=0.05, help="seconds per round (old build)")
    p.add_argument("--warm-iters", type=int, default=5)
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=100_000)
    p.add_argument("--threshold", type=float, default=0.05, help="verdict margin (0.05: 5 %%)")
    p.add_argument("--aa", action="store_true", help="both sides run the old wheel (noise floor)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 process pair, 2 short rounds")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child-rows", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child_main(
            args.device, [r for r in args.child_rows.split(",") if r], args.warm_iters
        )
    if args.quick:
        args.processes, args.rounds, args.round_s = 1, 2, 0.005
        args.warm_iters, args.min_iters, args.max_iters = 2, 2, 200
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device here: run with --device cpu for a smoke run of the code paths")
            return 2
    return run_parent(args, argv)


if __name__ == "__main__":
    sys.exit(main())

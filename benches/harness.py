"""What every bench here shares: timing, the environment a result was measured in, result
files, and the SGLang peer.

A bench script is a list of scenarios; this module is the rest:

* timing: :class:`Config` (rounds, seconds per round, warm-up and iteration bounds),
  :func:`timed_round` (one round with the garbage collector off), :func:`calibrate`
  (iterations that fill a round), :func:`interleave` (warm-up, then contenders' rounds
  interleaved), :func:`host_us_per_call` / :func:`host_us_min` (host
  time of back-to-back calls on a device, synchronised at the ends only);
* environment: :func:`environment` (CPU, memory, versions, ukv's commit and native build),
  :func:`machine` and :func:`versions` (the result files' one-line forms), :func:`utc_now`,
  :func:`command`, :func:`load_average`; :func:`repo_path` and :func:`relative_paths` (paths
  as results record them: never a machine's own directories);
* output: :func:`write_results` (the markdown file and its JSON twin), :func:`fmt_us`;
* the peer: :func:`load_peer` loads SGLang's allocator through ``peer_sglang.py`` (or says
  why it could not) and leaves the process as every timed bench wants it.

Scripts import it as ``harness`` (``benches/`` is on ``sys.path`` when a script runs from
it; a script loaded by path, as the tests load ``soak_cuda.py``, puts it there first).
Standard library and torch only at import; ukv, numpy and Triton are imported on use.
"""

from __future__ import annotations

import datetime
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


# ------------------------------------------------------------------------------ timing


@dataclass
class Config:
    """How long a bench measures: ``rounds`` timed rounds of about ``round_s`` seconds each,
    after a warm-up of ``warm_iters`` ops; ops per round stay within ``[min_iters,
    max_iters]``."""

    rounds: int
    round_s: float
    warm_iters: int
    min_iters: int
    max_iters: int

    @classmethod
    def from_args(cls, args: Any, quick: Config, full: Config) -> Config:
        """``quick`` or ``full`` as ``--quick`` says, with ``--rounds``/``--round-s`` applied."""
        cfg = quick if args.quick else full
        if args.rounds is not None:
            cfg.rounds = args.rounds
        if args.round_s is not None:
            cfg.round_s = args.round_s
        return cfg


def timed_round(fn: Callable[[int, bool], float], n: int) -> float:
    """``fn(n, False)`` (a trace that times itself and returns seconds) with the garbage
    collector collected first and off inside."""
    gc.collect()
    gc.disable()
    try:
        return fn(n, False)
    finally:
        gc.enable()


def calibrate(cfg: Config, seconds_per_op: float) -> int:
    """Ops per round: ``cfg.round_s`` worth, within ``[cfg.min_iters, cfg.max_iters]``."""
    return int(min(cfg.max_iters, max(cfg.min_iters, cfg.round_s / max(seconds_per_op, 1e-9))))


def interleave(
    cfg: Config,
    count: int,
    warm: Callable[[int, int], float],
    timed: Callable[[int, int], float],
    failed: Callable[[int, BaseException], None] | None = None,
) -> tuple[list[int | None], list[list[float]]]:
    """The method every comparison here shares: warm each of ``count`` contenders up, size
    its rounds, then run ``cfg.rounds`` rounds with the contenders interleaved (contender
    0, 1, ..., then again), so a slow stretch of the machine hits them all alike.

    Args:
        warm: ``warm(j, n)``: contender ``j``'s warm-up of ``n = cfg.warm_iters`` ops (it
            validates what it can); returns seconds per op, which sizes its rounds.
        timed: ``timed(j, n)``: one timed round of ``n`` ops; returns its seconds.
        failed: Where a contender's exception goes (it is then dropped, the others run on);
            without it an exception ends the measurement.

    Returns:
        Per contender: ops per round (None once dropped) and µs per op of each round.
    """
    iters: list[int | None] = [None] * count
    per_round: list[list[float]] = [[] for _ in range(count)]
    for j in range(count):
        try:
            iters[j] = calibrate(cfg, warm(j, cfg.warm_iters))
        except Exception as exc:
            if failed is None:
                raise
            failed(j, exc)
    for _ in range(cfg.rounds):
        for j in range(count):
            n = iters[j]
            if n is None:
                continue
            try:
                per_round[j].append(timed(j, n) / n * 1e6)
            except Exception as exc:
                if failed is None:
                    raise
                failed(j, exc)
                iters[j] = None
    return iters, per_round


def freeze_gc() -> None:
    """Move what is alive now (torch, SGLang: about a million objects) to the permanent
    generation, so the collection before each round stays cheap."""
    gc.collect()
    gc.freeze()


def host_us_per_call(fn: Callable[[], object], calls: int, warmup: int = 20) -> float:
    """Host µs per call of ``calls`` back-to-back calls, one CUDA synchronize at each end."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def host_us_min(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Min over ``rounds`` of host µs per call; the device is drained between rounds only."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    torch.cuda.synchronize()
    return best * 1e6


# ------------------------------------------------------------------------- environment


def sh(cmd: list[str], timeout: float = 20) -> str:
    """A command's stdout, stripped; ``?`` when it cannot run (facts are best effort)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout.strip()
    except Exception:  # noqa: BLE001 - environment facts are best effort
        return "?"


def utc_now() -> str:
    """The date of a result: UTC, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def load_average() -> str:
    return sh(["uptime"]).split("load average:")[-1].strip()


def command(script: str, argv: list[str] | None, prefix: str = "python") -> str:
    """The command line a result came from: ``prefix benches/<script> args``, with each
    absolute path in the arguments (alone or after ``--opt=``) as :func:`repo_path` writes
    it, so a committed result names no directory of the machine it was made on."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join([prefix, f"benches/{script}", *map(_portable_arg, args)])


def _portable_arg(arg: str) -> str:
    opt, eq, value = arg.partition("=")
    if eq and opt.startswith("-") and value.startswith("/"):
        return f"{opt}={repo_path(value)}"
    return repo_path(arg) if arg.startswith("/") else arg


def repo_path(path: str | Path) -> str:
    """``path`` as a result file records it: relative to the repository when inside it (an
    installed ukv package stands for ``python/ukv``), ``$OUT/...`` under the folder that
    ``$OUT`` names (the device machine's output folder), else ``.../<last part>``."""
    p = Path(path).resolve()
    for root, name in _path_roots():
        if p == root or root in p.parents:
            rel = p.relative_to(root).as_posix()  # "." for the root itself
            return rel if not name else name if rel == "." else f"{name}/{rel}"
    return f".../{p.name}"


def _path_roots() -> list[tuple[Path, str]]:
    """Directories a result may mention, deepest first, and what each is written as ('':
    the path relative to the directory)."""
    roots = [(REPO, "")]
    ukv_spec = importlib.util.find_spec("ukv")
    if ukv_spec is not None and ukv_spec.origin is not None:
        roots.append((Path(ukv_spec.origin).resolve().parent, "python/ukv"))
    if os.environ.get("OUT", "").startswith("/"):
        roots.append((Path(os.environ["OUT"]).resolve(), "$OUT"))
    return sorted(roots, key=lambda r: len(r[0].parts), reverse=True)


def relative_paths(text: str) -> str:
    """``text`` (a profile, a traceback) with the absolute paths of files of the repository,
    of ukv and of the modules on ``sys.path`` written relative to them: ``python/ukv/pool.py``,
    ``benches/x.py``, ``torch/cuda/__init__.py``."""
    # The repository and ukv's package first (deepest first), so that neither a sys.path
    # entry inside the repository (``benches/``, a script's own folder) nor the folder an
    # installed ukv sits in drops part of their names.
    for root, name in _path_roots():
        text = text.replace(str(root) + os.sep, f"{name}/" if name else "")
    dirs = {Path(d).resolve() for d in sys.path if os.path.isabs(d)}
    outside = [d for d in dirs if len(d.parts) > 1 and REPO not in (d, *d.parents)]
    for d in sorted(outside, key=lambda d: len(d.parts), reverse=True):
        text = text.replace(str(d) + os.sep, "")
    return text


def _cpu_model() -> str:
    for line in sh(["lscpu"]).splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _mem_gib() -> str:
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        return f"{kb / (1 << 20):.1f} GiB"
    except Exception:  # noqa: BLE001
        return "?"


def ukv_commit() -> str:
    """ukv's git commit (``UKV_COMMIT`` first: a copied tree's git may be stale)."""
    if os.environ.get("UKV_COMMIT"):  # set by benches/gpu_run.sh
        return os.environ["UKV_COMMIT"]
    sha = sh(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    dirty = sh(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    return f"{sha} (working tree has uncommitted changes)" if dirty else sha


def dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "not installed"
    return str(triton.__version__)


def environment() -> dict[str, Any]:
    """The host and the software a result was measured with."""
    import numpy as np

    import ukv

    so = sorted(Path(ukv.__file__).parent.glob("_core*.so"))
    built = (
        datetime.datetime.fromtimestamp(so[0].stat().st_mtime, datetime.UTC).isoformat(
            timespec="seconds"
        )
        if so
        else "?"
    )
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory": _mem_gib(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "ukv": f"{dist_version('ukv')} @ {ukv_commit()}, native module built {built}",
        "sglang": dist_version("sglang"),
        "torch_threads": torch.get_num_threads(),
    }


def machine(cuda: bool) -> str:
    """The GPU (from nvidia-smi) and the host, in one line."""
    env = environment()
    host = f"{env['nproc']} CPUs ({env['cpu']}), {env['memory']} RAM"
    if not cuda:
        return f"no GPU (--device cpu); {host}"
    smi = sh(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    )
    return f"{smi or torch.cuda.get_device_name()} (nvidia-smi); {host}"


def versions() -> str:
    """Python, torch, Triton, NumPy, ukv and SGLang versions, in one line."""
    env = environment()
    return (
        f"Python {env['python']}, torch {env['torch']} ({env['torch_threads']} CPU thread), "
        f"triton {_triton_version()}, numpy {env['numpy']}, ukv {env['ukv']}, "
        f"sglang {env['sglang']}"
    )


def gpu_versions() -> str:
    """torch, Triton, CUDA and Python versions, for the GPU-only benches."""
    return (
        f"torch {torch.__version__}, triton {_triton_version()}, "
        f"CUDA {torch.version.cuda}, Python {platform.python_version()}"
    )


# ------------------------------------------------------------------------------ output


def write_results(md: Path, text: str, data: Any, json_path: Path | None = None, indent: int = 1):
    """Write the markdown ``text`` to ``md`` and ``data`` as JSON beside it (``.json``), or
    to ``json_path``; parent directories are created."""
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    target = json_path if json_path is not None else md.with_suffix(".json")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=indent) + "\n")


def fmt_us(x: float | None) -> str:
    """Microseconds as the tables print them: ``—`` for none, 1 decimal from 100 up."""
    if x is None:
        return "—"
    return f"{x:.1f}" if x >= 100 else f"{x:.2f}"


# -------------------------------------------------------------------------------- peer


def load_peer(skip: bool, device: str = "cpu") -> tuple[Any | None, str]:
    """SGLang's pool factory from ``peer_sglang.py`` and a line that says what was loaded
    (or ``MISSING: why``, or that ``--no-peer`` skipped it).

    Importing SGLang may change torch's thread count; the caller's count is kept, and the
    objects alive afterwards are frozen out of the garbage collector's rounds.
    """
    factory, desc = None, "skipped (--no-peer)"
    threads = torch.get_num_threads()
    if not skip:
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        import peer_sglang

        factory, reason = peer_sglang.load(device)
        desc = reason if factory is not None else f"MISSING: {reason}"
    print(f"peer: {desc}", flush=True)
    torch.set_num_threads(threads)  # importing sglang must not change it
    freeze_gc()
    return factory, desc

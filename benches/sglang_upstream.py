"""SGLang's own unit tests for its unified pool, on SGLang's code and on the ukv drop-in.

The six files of upstream's ``test/registered/unit/mem_cache/`` (``test_multi_ended_allocator.py``,
``test_layout_compat.py``, ``test_page_major_layout.py``, ``test_full_loc_fast_path.py``,
``test_unified_mamba_views.py``, ``test_store_cache_4d.py``) at the version matching SGLang
0.5.16 live outside this repository (upstream's code is never committed here); ``--tests``
names their directory. They run unchanged with pytest, in child processes, twice:

* ``sglang``: on SGLang's own modules;
* ``dropin``: with ``ukv.integrations.sglang.install()`` called from a ``sitecustomize.py``
  in a temporary directory put first on ``PYTHONPATH``, exactly as docs/SGLANG.md tells
  users, so SGLang's ``unified_memory_pool`` / ``multi_ended_allocator`` are the drop-in.

Both children load ``tests/sglang_stubs.py`` (``-p sglang_stubs``): SGLang's directories from
``--sglang-path`` go first on ``sys.path`` and the packages SGLang imports but this path never
calls are stand-ins; ``--stub NAME`` adds names to that list for this run (via
``UKV_SGLANG_STUBS``; e.g. ``--stub sgl_kernel`` on a GPU machine without it). Outcomes come
from pytest's junit XML. ``--device cpu`` hides any GPU from the children (the CUDA-only tests
skip); ``--device cuda`` needs one.

The result, per test SGLang's outcome and the drop-in's (with the first line of each failure),
totals per file and the run's facts, goes to ``<out>/sglang-upstream-<device>.md`` and
``.json``; paths in it are relative to the repository or placeholders (``<tests>``,
``<sglang>``, ``<python>``).

Usage (from the repository root)::

    python benches/sglang_upstream.py --tests /path/to/upstream016 --device cpu
    python benches/sglang_upstream.py --tests up016 --sglang-path sgl016:sgl016-deps \\
        --device cuda --stub sgl_kernel --out benches/results/
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FILES = (
    "test_multi_ended_allocator.py",
    "test_layout_compat.py",
    "test_page_major_layout.py",
    "test_full_loc_fast_path.py",
    "test_unified_mamba_views.py",
    "test_store_cache_4d.py",
)
SIDES = ("sglang", "dropin")
OUTCOMES = ("passed", "failed", "skipped", "error")
SITECUSTOMIZE = "import ukv.integrations.sglang\n\nukv.integrations.sglang.install()\n"


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tests", type=Path, required=True, help="directory of the six files")
    p.add_argument("--sglang-path", default=os.environ.get("UKV_SGLANG_PATH", ""))
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--stub", action="append", default=[], help="one more stand-in package")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per child")
    a = p.parse_args()
    a.tests = a.tests.resolve()
    a.paths = [str(Path(d).resolve()) for d in a.sglang_path.split(os.pathsep) if d]
    missing = [f for f in FILES if not (a.tests / f).is_file()]
    if missing:
        sys.exit(f"--tests {a.tests}: missing {', '.join(missing)}")
    if not any(Path(d, "sglang").is_dir() for d in a.paths):
        sys.exit("SGLang not found: pass --sglang-path or set UKV_SGLANG_PATH (docs/SGLANG.md)")
    return a


def _ukv_root() -> str:
    """The directory the ``ukv`` package imports from (installed, else ``python/``)."""
    try:
        import ukv
    except ImportError:
        sys.path.insert(0, str(ROOT / "python"))
        import ukv
    return str(Path(ukv.__file__).resolve().parent.parent)


class Paths:
    """Makes the machine's absolute paths relative to the repository, or placeholders."""

    def __init__(self, args: argparse.Namespace) -> None:
        subs = [(str(args.tests), "<tests>"), (str(ROOT), ".")]
        subs += [(d, "<sglang>") for d in args.paths]
        subs += [(sys.prefix, "<python>"), (sys.base_prefix, "<python>")]
        subs += [(tempfile.gettempdir(), "<tmp>")]
        self.subs = sorted(set(subs), key=lambda s: -len(s[0]))

    def __call__(self, text: str) -> str:
        for old, new in self.subs:
            text = text.replace(old + "/", new + "/").replace(old, new)
        return text


def run_side(side: str, args: argparse.Namespace, ukv_root: str) -> dict[str, dict]:
    """One pytest child over the six files; per test ``{outcome, message, trace}``."""
    with tempfile.TemporaryDirectory(prefix=f"ukv-upstream-{side}-") as tmp:
        path = [str(ROOT / "tests"), ukv_root]
        if side == "dropin":
            Path(tmp, "sitecustomize.py").write_text(SITECUSTOMIZE)
            path.insert(0, tmp)
        env = dict(os.environ)
        old = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join(path + ([old] if old else []))
        env["UKV_SGLANG_PATH"] = os.pathsep.join(args.paths)
        env["UKV_SGLANG_STUBS"] = ",".join(args.stub)
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave --tests (maybe read-only) untouched
        if args.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        Path(tmp, "pytest.ini").write_text("[pytest]\n")  # none of ukv's pytest settings
        xml = Path(tmp, "junit.xml")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "sglang_stubs", "-p", "no:cacheprovider"]
        cmd += ["-c", str(Path(tmp, "pytest.ini")), "--rootdir", str(args.tests)]
        cmd += [f"--junitxml={xml}", *[str(args.tests / f) for f in FILES]]
        res = subprocess.run(
            cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=args.timeout
        )
        if not xml.is_file():
            sys.exit(
                f"{side}: pytest wrote no junit XML (rc {res.returncode}):\n"
                + (res.stdout + res.stderr)[-4000:]
            )
        tail = res.stdout.strip().splitlines()[-1:]
        print(f"{side}: {tail[0] if tail else '?'}", flush=True)
        return parse_junit(xml)


def parse_junit(xml: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        module, _, cls = case.get("classname", "").partition(".")
        if module:
            key = f"{module}.py::{cls + '::' if cls else ''}{case.get('name')}"
        else:  # a file that failed to collect
            key = f"{case.get('name', '?').replace('.', '/')}.py::(collection)"
        outcome, message, trace = "passed", "", ""
        for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            el = case.find(tag)
            if el is not None:
                outcome, message, trace = name, el.get("message", ""), el.text or ""
                break
        lines = [ln for ln in message.splitlines() if ln.strip()] or [""]
        out[key] = {
            "outcome": outcome,
            "message": lines[0][:300],
            "trace": "\n".join(trace.splitlines()[-40:]) if outcome in ("failed", "error") else "",
        }
    return out


def _versions(args: argparse.Namespace) -> dict[str, str]:
    import importlib.metadata

    import torch

    sys.path.insert(0, str(HERE))
    import harness

    sglang = next(
        (
            d.version
            for d in importlib.metadata.distributions(path=args.paths)
            if d.metadata["Name"] == "sglang"
        ),
        "?",
    )
    try:
        import triton

        tri = triton.__version__
    except ImportError:
        tri = "not installed"
    cuda = f", CUDA {torch.version.cuda}" if args.device == "cuda" else ""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__ + cuda,
        "triton": tri,
        "sglang": sglang,
        "ukv": harness.ukv_commit(),
        "machine": harness.machine(args.device == "cuda"),
        "date": harness.utc_now(),
    }


def _totals(results: dict[str, dict], keys: list[str]) -> dict[str, int]:
    t = {o: 0 for o in OUTCOMES}
    for k in keys:
        if k in results:
            t[results[k]["outcome"]] += 1
    return t


def report(args: argparse.Namespace, sides: dict[str, dict], facts: dict, rel: Paths) -> None:
    def file_rank(key: str) -> int:
        name = key.split("::")[0]
        return FILES.index(name) if name in FILES else len(FILES)

    # pytest's order within a file (definition order), the files in FILES' order
    keys = sorted(dict.fromkeys([*sides["sglang"], *sides["dropin"]]), key=file_rank)
    per_file = {f: [k for k in keys if k.split("::")[0] == f] for f in FILES}
    totals = {f: {s: _totals(sides[s], ks) for s in SIDES} for f, ks in per_file.items()}
    totals["all"] = {s: _totals(sides[s], keys) for s in SIDES}
    shas = {f: hashlib.sha256((args.tests / f).read_bytes()).hexdigest()[:16] for f in FILES}
    argv = [rel(a) for a in sys.argv[1:]]
    facts["command"] = " ".join(["python", "benches/sglang_upstream.py", *argv])
    tests = [
        {
            "test": k,
            **{
                s: {n: rel(v) for n, v in sides[s].get(k, {"outcome": "absent"}).items()}
                for s in SIDES
            },
        }
        for k in keys
    ]
    data = {
        **facts,
        "device": args.device,
        "stubs": args.stub,
        "files_sha256": shas,
        "totals": totals,
        "tests": tests,
    }

    def cell(t: dict) -> str:
        return " / ".join(str(t[o]) for o in OUTCOMES)

    md = [
        f"# SGLang's own unified-pool tests: SGLang 0.5.16 vs the ukv drop-in ({args.device})",
        "",
    ]
    md += [
        f"* command: `{facts['command']}`",
        f"* date: {facts['date']}",
        f"* machine: {facts['machine']}",
        f"* versions: Python {facts['python']}, torch {facts['torch']}, triton {facts['triton']}, "
        f"sglang {facts['sglang']}, ukv {facts['ukv']}",
        f"* stand-ins added: {', '.join(args.stub) or 'none'}",
        "* `<tests>`: the directory of upstream's six files (their sources: SOURCE.txt there); "
        "sha256 prefixes in the JSON",
        "",
    ]
    md += [
        "## Totals (passed / failed / skipped / error)",
        "",
        "| file | tests | SGLang | drop-in |",
        "|---|---:|---|---|",
    ]
    for f in (*FILES, "all"):
        n = len(per_file[f]) if f != "all" else len(keys)
        md.append(f"| {f} | {n} | {cell(totals[f]['sglang'])} | {cell(totals[f]['dropin'])} |")
    md += [
        "",
        "## Per test",
        "",
        "| test | SGLang | drop-in | first line of the failure |",
        "|---|---|---|---|",
    ]
    for t in tests:
        msgs = [f"{s}: {t[s]['message']}" for s in SIDES if t[s]["outcome"] in ("failed", "error")]
        msg = "; ".join(msgs).replace("|", "\\|")
        md.append(
            f"| `{t['test']}` | {t['sglang']['outcome']} | {t['dropin']['outcome']} | {msg} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"sglang-upstream-{args.device}"
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    print(
        f"SGLang {cell(totals['all']['sglang'])}; drop-in {cell(totals['all']['dropin'])} "
        f"(passed / failed / skipped / error) -> {rel(str(stem))}.md/.json"
    )


def main() -> None:
    args = _args()
    ukv_root = _ukv_root()
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit("--device cuda: no GPU visible")
    sides = {side: run_side(side, args, ukv_root) for side in SIDES}
    report(args, sides, _versions(args), Paths(args))


if __name__ == "__main__":
    main()

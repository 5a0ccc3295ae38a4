"""Both pools over the matrix: two child processes (one per pool), then the comparison.

The parent never imports SGLang: each child is ``sglang_scheduler_driver.py --pool P
--matrix FILE`` (the drop-in must be installed before SGLang imports its pool, so one
process cannot hold both). They run in parallel by default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sglang_scheduler import compare, config

DRIVER = Path(__file__).resolve().parents[1] / "sglang_scheduler_driver.py"
NOT_RUN = (
    "more SWA than full layers (SGLang 0.5.16's SWA table then indexes out of bounds, its defect 1)"
)


def run_pool(
    pool: str, configs: list[config.Config], device: str, env: dict[str, str], timeout: int
) -> subprocess.Popen:
    """Start the child that runs ``configs`` on ``pool``."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix=f"sglang-{pool}-")
    with os.fdopen(fd, "w") as f:
        f.write(config.dumps(configs))
    cmd = [
        sys.executable,
        str(DRIVER),
        "--pool",
        pool,
        "--device",
        device,
        "--matrix",
        path,
        "--quiet",
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def summary(proc: subprocess.Popen, timeout: int) -> tuple[list[dict[str, Any]], str]:
    """The child's ``SUMMARY`` results and the tail of its output."""
    out, err = proc.communicate(timeout=timeout)
    tail = (out[-3000:] + "\n" + err[-3000:]).strip()
    lines = [line for line in out.splitlines() if line.startswith("SUMMARY ")]
    if not lines:
        raise RuntimeError(
            f"the {proc.args[3]} child printed no SUMMARY (exit {proc.returncode}):\n{tail}"
        )
    return json.loads(lines[-1][len("SUMMARY ") :]), tail


def run(
    matrix: list[tuple[config.Config, bool]],
    device: str = "cpu",
    env: dict[str, str] | None = None,
    parallel: bool = True,
    timeout: int = 1800,
    extra_ukv: tuple[config.Config, ...] = (),
) -> dict[str, Any]:
    """Run the matrix on both pools (and ``extra_ukv`` on the drop-in only); returns
    ``{"sglang", "ukv", "pairs"}``."""
    env = dict(env or os.environ)
    both = [c for c, sglang_ok in matrix] + list(extra_ukv)
    theirs = [c for c, sglang_ok in matrix if sglang_ok]
    if parallel:
        procs = {"ukv": run_pool("ukv", both, device, env, timeout)}
        procs["sglang"] = run_pool("sglang", theirs, device, env, timeout)
        results = {pool: summary(p, timeout)[0] for pool, p in procs.items()}
    else:
        results = {}
        for pool, cfgs in (("ukv", both), ("sglang", theirs)):
            results[pool] = summary(run_pool(pool, cfgs, device, env, timeout), timeout)[0]
    return combine(results)


def combine(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Pair each configuration's two runs (``{"sglang": [...], "ukv": [...]}``, the children's
    summaries) and compare them; the drop-in's self-tests apart."""
    by_name = {r["config"]: r for r in results["sglang"]}
    pairs, self_tests = [], []
    for r in results["ukv"]:
        if "-corrupt-" in r["config"]:
            self_tests.append(r)
            continue
        other = by_name.get(r["config"])
        if other is None:
            pairs.append({"config": r["config"], "ukv": compare._brief(r)})
        else:
            pairs.append(compare.compare(other, r))
    return {
        "sglang": results["sglang"],
        "ukv": results["ukv"],
        "pairs": pairs,
        "self_tests": self_tests,
    }


def _one_line(text: str, n: int) -> str:
    return " ".join(text.split())[:n].replace("|", "/")


def _patches(counts: dict[str, int] | None) -> str:
    used = {k: v for k, v in (counts or {}).items() if v}
    return ", ".join(f"{k} ×{v}" for k, v in used.items()) or "-"


def _spec(spec: dict[str, int] | None) -> str:
    if not spec or not spec.get("verify_steps"):
        return "-"
    return f"{spec['verify_steps']} ({spec['drafts_written']}/{spec['drafts_accepted']})"


def _moved(moved: dict[str, int] | None) -> str:
    if moved is None:
        return "-"
    return ", ".join(f"{k} {v}" for k, v in moved.items())


def _divergence(div: dict[str, Any], verdict: str) -> str:
    def one(x: dict[str, Any] | None) -> str:
        if x is None:
            return "ended"
        return f"{x['admitted']} admitted, {x['retracted']} retracted, {x['evicted']} evicted"

    return f"iteration {div['step']}: {one(div['sglang'])} → {one(div['ukv'])} ({verdict})"


def markdown(res: dict[str, Any]) -> str:
    """The results table: one row per configuration and pool."""
    head = (
        "| configuration | pool | iterations | admitted | from tree | decoded | retracted "
        "| aborted | evicted full/SWA/state | offload round trips | checks (tokens, states) "
        "| idle/busy checks | patched SGLang paths taken | verify steps (drafts written/accepted) "
        "| ukv pages moved | s | first divergence (SGLang → drop-in) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for p in res["pairs"]:
        div = p.get("first_divergence")
        if "sglang" not in p:
            div_s = "(drop-in only)"
        elif div is None:
            div_s = "identical runs"
        else:
            div_s = _divergence(div, p["verdict"])
        for pool in ("sglang", "ukv"):
            b = p.get(pool)
            if b is None:
                rows.append(
                    f"| {p['config']} | sglang | not run: {NOT_RUN} | | | | | | | | | | | | | | |"
                )
                continue
            status = "" if b["error"] is None else f" **failed: {_one_line(b['error'], 100)}**"
            off = (
                str(b["offload"])
                if not b["offload_unsupported"]
                else f"{b['offload']} (then: {_one_line(b['offload_unsupported'], 60)})"
            )
            rows.append(
                f"| {p['config']} | {pool}{status} | {b['iterations']} | {b['admitted']} | {b['cached']} "
                f"| {b['decoded']} | {b['retracted']} | {b['aborted']} "
                f"| {b['evicted_full']}/{b['evicted_swa']}/{b['evicted_mamba']} | {off} "
                f"| {b['checks']} ({b['tokens_checked']}, {b['states_checked']}) "
                f"| {b['idle_checks']}/{b['busy_checks']} | {_patches(b['patches'])} "
                f"| {_spec(b.get('spec'))} | {_moved(b.get('moved'))} | {b['seconds']} "
                f"| {div_s if pool == 'ukv' else ''} |"
            )
    return head + "\n".join(rows) + "\n"

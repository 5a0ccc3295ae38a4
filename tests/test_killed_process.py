"""Issue 12: a process killed mid-run loses nothing that was already returned to the caller.

A child (``fixtures/killed_child.py``) runs a serving loop on a pool and acknowledges each
offloaded request (``get_cpu_copy``, waited, saved with an atomic rename) on stdout. The
test kills it with SIGKILL at a random acknowledgement, several times, in eager and lazy
mode, each child in the same directory and Triton cache as the last. Then every
acknowledged copy must hold exactly its request's bytes, and a fresh child in the same
environment (on a GPU: the Triton cache the killed children were writing) must run to
the end with every live token intact.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import torch

CHILD = Path(__file__).parent / "fixtures" / "killed_child.py"
sys.path.insert(0, str(CHILD.parent))

from killed_child import expected  # noqa: E402


def _child(out: Path, device: str, seed: int, steps: int, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(out), device, str(seed), str(steps)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_killed_process_loses_nothing_it_returned(tmp_path: Path, device: str) -> None:
    rng = random.Random(12)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton-cache"))
    acked: list[str] = []
    kills = 0
    for seed in range(1, 5):  # odd seeds run a lazy pool
        child = _child(tmp_path, device, seed, 10_000, env)
        stop_after = rng.randint(2, 12)
        assert child.stdout is not None
        got = 0
        for line in child.stdout:
            if line.startswith("ack "):
                acked.append(line.split()[1])
                got += 1
                if got == stop_after:
                    # Mid-run: the child is already inside its next steps.
                    child.send_signal(signal.SIGKILL)
                    kills += 1
                    break
        child.wait(timeout=120)
        assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    assert kills == 4 and len(acked) >= 8
    for name in acked:
        saved = torch.load(tmp_path / name)
        want = expected(saved["q"], len(saved["k"]))
        assert torch.equal(saved["k"], want) and torch.equal(saved["v"], want), name
    # A fresh process in the same environment runs to the end, every live token intact.
    for seed in (5, 6):
        child = _child(tmp_path, device, seed, 300, env)
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0 and out.rstrip().endswith("done"), err[-2000:]

"""The differential test (issue 18): a seeded engine drives a pool and the model side by
side over the whole public surface, checking every touched byte after every step and
every live byte at each full check (driver.py says what runs).

CI runs every pool kind (2 and 3 sub-pools, Mamba and SWA composites, a middle band at
any spec index), eager and lazy, page size 1 and 4 on the host executor, page size 16
and the packed executor (Triton's interpreter) with fewer steps. Knobs for long runs:
``UKV_DIFF_STEPS`` (steps per run), ``UKV_DIFF_SEEDS`` (seeds per configuration),
``UKV_DIFF_FULL_EVERY`` (steps between full checks). On ``UKV_TEST_DEVICE=cuda`` the pool
is on the GPU and frees of device ids are real ones. ``benches/diff_cuda.py`` runs the
same engine for 10^6 steps on the GPU.

The ``test_finds_*`` tests switch on the engine sequences that hit the round-3 defects
(review-round3.md) on seeds that failed before the fixes (2d4a02f); they were marked ``xfail`` until
the fixes land.
"""

from __future__ import annotations

import os

import pytest

from .driver import KINDS, Config, DiffFailure, Engine

STEPS = int(os.environ.get("UKV_DIFF_STEPS", "500"))
SEEDS = int(os.environ.get("UKV_DIFF_SEEDS", "1"))
FULL_EVERY = int(os.environ.get("UKV_DIFF_FULL_EVERY", "1"))


@pytest.fixture
def host_executor(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU pool's own executor (NumPy moves), not the packed one of the interpreter."""
    if device != "cpu":
        pytest.skip("the host executor is the CPU pool's")
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.fixture
def packed_executor(device: str) -> None:
    """The packed executor: on CPU only under Triton's interpreter (tests/conftest.py)."""
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the packed executor runs on CPU only under TRITON_INTERPRET=1")


def _run(cfg: Config, device: str, steps: int, seeds: range) -> None:
    for seed in seeds:
        eng = Engine(cfg, seed, device)
        totals = eng.run(steps, FULL_EVERY)
        eng.drain()
        assert totals.bytes_checked > 0, "the run checked no bytes: it tests nothing"
        if steps >= 200:
            assert eng.pool.stats().pages_moved > 0, "the run never compacted"
            assert totals.ops.get("free_queued", 0) + totals.ops.get("free_swa_queued", 0)


CONFIGS = [
    pytest.param(Config(kind, ps, lazy), id=Config(kind, ps, lazy).label)
    for kind in KINDS
    for ps in (1, 4)
    for lazy in (False, True)
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_differential_host(cfg: Config, device: str, host_executor: None) -> None:
    _run(cfg, device, STEPS, range(SEEDS))


@pytest.mark.parametrize(
    "cfg",
    [
        pytest.param(Config(k, 16, lazy), id=Config(k, 16, lazy).label)
        for k in KINDS
        for lazy in (False, True)
    ],
)
def test_differential_page16(cfg: Config, device: str, host_executor: None) -> None:
    _run(cfg, device, max(40, STEPS // 4), range(SEEDS))


@pytest.mark.parametrize(
    "cfg",
    [
        pytest.param(Config(kind, ps, lazy), id=Config(kind, ps, lazy).label)
        for kind, ps, lazy in [
            ("mamba2", 4, False),
            ("mamba3", 1, True),
            ("swa2", 1, True),
            ("swa3", 4, False),
        ]
    ],
)
def test_differential_packed(cfg: Config, device: str, packed_executor: None) -> None:
    steps = STEPS if device == "cuda" else max(30, STEPS // 8)
    _run(cfg, device, steps, range(SEEDS))


# ----- the round-3 defects, found by the engine (seeds that failed before the fixes) -----

FOUND = {
    "C1": [
        ("swa2", 1, False, 1),
        ("swa2", 4, False, 1),
        ("swa3", 1, False, 0),
        ("swa3", 4, False, 0),
    ],
    "C2": [("mamba2", 1, False, 2), ("mamba2", 4, False, 1), ("swa2", 4, True, 0)],
    "C3": [("swa2", 1, False, 0), ("swa2", 4, True, 1), ("swa3", 1, False, 0)],
    "C5": [("swa2", 1, True, 0), ("mamba2", 4, True, 0)],
    "C6": [("mamba2", 4, True, 1), ("mamba3", 1, True, 0), ("mamba3", 4, True, 1)],
    "C7": [("mamba3", 1, True, 1), ("swa2", 4, True, 0), ("mamba2", 4, True, 3)],
}


def _finds(defect: str, device: str) -> None:
    failures = []
    for kind, ps, lazy, seed in FOUND[defect]:
        cfg = Config(kind, ps, lazy, frozenset([defect]))
        try:
            _run(cfg, device, 400, range(seed, seed + 1))
        except DiffFailure as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


def test_finds_c1_free_swa_inside_a_free_group(device: str, host_executor: None) -> None:
    _finds("C1", device)


def test_finds_c2_request_table_span_frees(device: str, host_executor: None) -> None:
    _finds("C2", device)


def test_finds_c3_host_frees_overtaking_queued_frees(device: str, host_executor: None) -> None:
    _finds("C3", device)


def test_finds_c5_overlapped_lazy_forwards(device: str, host_executor: None) -> None:
    _finds("C5", device)


def test_finds_c6_states_moved_under_a_lazy_forward(device: str, host_executor: None) -> None:
    _finds("C6", device)


def test_finds_c7_reused_host_out_cache_loc(device: str, host_executor: None) -> None:
    _finds("C7", device)

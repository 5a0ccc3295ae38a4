"""SGLang's own scheduler on its unified pool and on the ukv drop-in, side by side, for
the release ``UKV_SGLANG_PATH`` holds (0.5.16 or 0.5.23: ``benches/sglang_scheduler/
release.py`` is the seam; CI runs this file under both).

``benches/sglang_scheduler_driver.py`` drives SGLang's admission (``PrefillAdder``),
allocation with eviction, radix caches, retraction and idle leak check in strict mode on
one pool per process; these tests run it in child processes over the configuration matrix
and assert the pass criteria. They need SGLang installed ``--no-deps`` outside
site-packages and named by ``UKV_SGLANG_PATH`` (docs/SGLANG.md, "Testing against SGLang"),
and are skipped otherwise, as ``tests/test_sglang_dropin_real.py`` is.

The drop-in defects the driver found have their regression tests here too; they run
everywhere (the drop-in's stand-in bases suffice).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from dropin_builders import swa_bundle  # noqa: E402

# ----- drop-in defects the driver found ------------------------------------------------------


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("lazy", [False, True])
def test_free_swa_skips_tokens_already_freed(page_size: int, lazy: bool) -> None:
    """SGLang's ``UnifiedRadixCache`` evicts a node's full side first (``allocator.free``,
    which releases both sides), then its SWA component calls ``free_swa`` on the same ids
    (``SWAComponent.evict_component``). SGLang's composite keeps only the tokens whose SWA
    page is still bound, so that call does nothing; the drop-in raised
    ``SGLangDoubleFreeError`` ("not live") and took the scheduler down."""
    a = swa_bundle(full_tokens=64, swa_tokens=64, page_size=page_size, lazy=lazy)
    a = a.token_to_kv_pool_allocator
    gone = a.alloc(2 * page_size)
    kept = a.alloc(2 * page_size)
    a.free(gone)
    sizes = (a.full_available_size(), a.swa_available_size(), a.available_size())
    a.free_swa(gone)  # all of them freed already: nothing to do
    assert (a.full_available_size(), a.swa_available_size(), a.available_size()) == sizes
    a.free_swa(torch.cat([gone, kept]))  # a mix: only the live ones lose their SWA slot
    assert bool((a.translate_loc_from_full_to_swa(kept) == 0).all())
    assert bool((a.translate_kv_loc(kept) > 0).all())
    a.free(kept)


# ----- SGLang's scheduler on both pools -------------------------------------------------------

ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "benches"))
from sglang_scheduler import config as driver_config  # noqa: E402
from sglang_stubs import sglang_found, sglang_release  # noqa: E402


def needs_sglang(test: Any) -> Any:
    """SGLang 0.5.16 or 0.5.23 on ``UKV_SGLANG_PATH`` (a failure instead of a skip where
    ``UKV_REQUIRE_SGLANG=1``); the driver drives those releases' schedulers."""
    test = pytest.mark.skipif(
        not sglang_found(),
        reason="SGLang not found: set UKV_SGLANG_PATH to a --no-deps install (docs/SGLANG.md)",
    )(test)
    return pytest.mark.skipif(
        sglang_release() not in (None, "0.5.16", "0.5.23"),
        reason=f"UKV_SGLANG_PATH holds SGLang {sglang_release()}: the driver drives "
        "0.5.16 and 0.5.23",
    )(test)


#: Where the pools live (``UKV_TEST_DEVICE``; benches/gpu_run.sh's ``sglang`` part sets cuda).
DEVICE = os.environ.get("UKV_TEST_DEVICE", "cpu")

#: The matrix: SWA and Mamba x page sizes 1 and 16 x eager and lazy (the tree cache SGLang
#: builds), the other tree caches once each, and more SWA than full layers (drop-in only).
MATRIX = driver_config.matrix()
NAMES = [c.name for c, _ in MATRIX]
#: Drop-in runs that overwrite a live token's K/V (read by a forward, or held only by the
#: tree) or a live state on purpose: the checks must catch each.
SELF_TESTS = driver_config.self_tests()


@pytest.fixture(scope="module")
def side_by_side() -> dict:
    """Both pools over the matrix, one child process per pool, in parallel."""
    from sglang_scheduler import sidebyside

    import ukv

    env = dict(os.environ)
    ukv_root = os.path.dirname(os.path.dirname(os.path.abspath(ukv.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([ukv_root, env.get("PYTHONPATH", "")])
    res = sidebyside.run(
        MATRIX, DEVICE, env, parallel=True, timeout=900, extra_ukv=tuple(SELF_TESTS)
    )
    table = sidebyside.markdown(res)
    print(table)
    # UKV_SCHEDULER_OUT=PREFIX: the table and the results also as PREFIX.md / PREFIX.json
    # (benches/gpu_run.sh's sglang023 part keeps them; the driver's --side-by-side --out
    # writes the same from a run of its own)
    prefix = os.environ.get("UKV_SCHEDULER_OUT")
    if prefix:
        import json

        with open(prefix + ".md", "w") as f:
            f.write(f"SGLang {sglang_release()}, pools on {DEVICE}\n\n{table}\n")
        with open(prefix + ".json", "w") as f:
            json.dump({"sglang": sglang_release(), "device": DEVICE, **res}, f, indent=1)
    out = {p["config"]: p for p in res["pairs"]}
    out.update({r["config"]: r for r in res["self_tests"]})
    return out


def _check_run(brief: dict, name: str) -> None:
    hybrid = name.split("-")[0]
    assert brief["error"] is None, brief["error"]
    assert brief["checks"] == brief["iterations"] + 1  # after every iteration, and at the end
    assert brief["tokens_checked"] > 0
    if hybrid == "mamba":
        assert brief["states_checked"] > 0
        assert brief["busy_checks"] == brief["iterations"]
    assert brief["idle_checks"] >= 1  # SGLang's strict leak check, at least when drained
    if "-spec" in name:
        # Verify steps ran: every row's drafts written to the scratch and read back, at
        # least one draft accepted per row, the accepted one committed (then read back).
        spec = brief["spec"]
        assert spec["verify_steps"] > 0
        assert spec["drafts_written"] > spec["drafts_accepted"] >= spec["verify_steps"]


@needs_sglang
@pytest.mark.parametrize("name", NAMES)
def test_scheduler_runs_clean_on_the_dropin(side_by_side: dict, name: str) -> None:
    """No exception, no leak (SGLang's strict idle check), every live token's K/V and every
    live state read back intact after every iteration; SGLang's own pool too, where it can
    be built."""
    pair = side_by_side[name]
    _check_run(pair["ukv"], name)
    if "sglang" in pair:
        _check_run(pair["sglang"], name)


@needs_sglang
@pytest.mark.parametrize("name", [c.name for c, sglang_ok in MATRIX if sglang_ok])
def test_dropin_reports_at_least_sglangs_capacity(side_by_side: dict, name: str) -> None:
    """Same trace, same scheduler: until the two runs part, their states are identical, and
    in each of those iterations every capacity SGLang's admission and eviction read
    (joint, per side, state slots) is at least SGLang's on the drop-in. So the drop-in admits
    at least as many tokens per step; where it parts from SGLang by admitting fewer or
    retracting more, SGLang's own heuristics did it (benches/results/sglang-scheduler-cpu.md
    says which)."""
    pair = side_by_side[name]
    assert pair["capacity_shortfalls"] == [], pair["capacity_shortfalls"][:5]


@needs_sglang
@pytest.mark.parametrize("name", [c.name for c in SELF_TESTS])
def test_checks_catch_a_corrupted_token_or_state(side_by_side: dict, name: str) -> None:
    """A zeroed K/V row of a token a running request reads, of a token only the tree holds
    (the after-iteration read-back), or a zeroed state slot: each run fails with LostBytes."""
    err = side_by_side[name]["error"] or ""
    assert err.startswith("LostBytes"), err


@needs_sglang
def test_sglangs_swa_page_handover_runs_unpatched(side_by_side: dict) -> None:
    """0.5.23: no scheduling patch, and the SWA radix runs reach SGLang's own page handover
    (``SWAComponent._transfer_swa_pages``: ``bind`` + the tombstone write) on the drop-in,
    as often as on SGLang's pool where both run the same trace. 0.5.16 has no such path
    (its SWA radix recovery is the ``swa_locked_full_recovery`` patch)."""
    if sglang_release() != "0.5.23":
        pytest.skip("0.5.23's SWA component only")
    name = "SWAComponent._transfer_swa_pages"
    taken = {}
    for config, pair in side_by_side.items():
        if "ukv" not in pair or not config.startswith("swa-"):
            continue
        for side in ("ukv", "sglang"):
            if side in pair:
                patched = pair[side]["patches"] or {}
                assert "swa_page_transfer" not in patched, (config, side, patched)
        taken[config] = (pair["ukv"]["paths"] or {}).get(name, 0)
        if "sglang" in pair and pair.get("first_divergence") is None:
            assert taken[config] == (pair["sglang"]["paths"] or {}).get(name, 0), config
    print(f"{name} calls per SWA configuration on the drop-in: {taken}")
    assert sum(taken.values()) > 0, taken

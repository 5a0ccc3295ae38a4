"""Tensor-parallel modes when something goes wrong, over a real two-rank gloo group.

Review round 4 found two ways a group could go quiet instead of raising:

- F7: a tap installed on a released pool was dropped by ``resume_memory()`` (the new
  executor's ``run`` replaced the tap's wrapper), so the divergence check passed whatever
  the ranks did. Scenario ``tap-resume``: rank 1 makes one extra allocation after the
  resume; both ranks must raise ``DivergenceError`` at step 0.
- F8: a follower that failed while applying a step (a CUDA OOM, a launch failure, an
  interrupt) skipped the step's check collective: the leader waited in it forever (with
  the check on) or the follower served ids whose rows it never wrote (with it off).
  Scenario ``follower-fault``: the follower's replay raises on the second record of step
  0; both ranks must raise ``DivergenceError`` naming the follower's failure, and every
  later call on the follower must raise ``PoolPoisonedError``. ``follower-fault-nocheck``:
  the same without the check: the follower raises ``PoolPoisonedError`` at once and on
  every later call.

One spawn of two processes runs every scenario (importing torch is what costs time); each
scenario's outcome is written per rank to a JSON file. A gloo timeout of 20 s turns a
hang into an error, and the parent kills the ranks after :data:`DEADLINE_S`.
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import socket
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

SCENARIOS = ["tap-resume", "follower-fault", "follower-fault-nocheck"]
DEADLINE_S = 240
INJECTED = "injected: e.g. a CUDA OOM or a launch failure while replaying"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _specs() -> list[Any]:
    import ukv

    full = ukv.MHASpec("full", 2, 2, 4, torch.float32, grow="up")
    mamba = ukv.MambaSpec("mamba", 1, ((2, 3),), torch.float32, (2, 2), torch.float32, "down")
    return [full, mamba]


def _pool(device: str) -> Any:
    import ukv

    return ukv.UnifiedKVPool(1 << 15, _specs(), page_size=2, device=device)


def _tap_resume(rank: int, device: str) -> Any:
    from ukv.distributed import DivergenceError, ReplicatedPool

    pool = _pool(device)
    pool.release_memory()
    tp = ReplicatedPool(pool)
    pool.resume_memory()
    kv = pool.allocator("full")
    kv.alloc(4)
    if rank == 1:
        kv.alloc(2)  # the divergence the check must catch
    try:
        tp.step()
    except DivergenceError as e:
        return {"raised": True, "step": e.step, "op": e.op, "message": str(e)}
    return {"raised": False}


def _break_second_record(fp: Any) -> None:
    """The follower's replay raises on the second record it applies."""
    real = fp._replay.apply
    calls = [0]

    def apply(rec: Any, payload: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError(INJECTED)
        real(rec, payload)

    fp._replay.apply = apply


def _follower_fault(rank: int, device: str, check: bool) -> Any:
    import ukv
    from ukv.distributed import DivergenceError, FollowerPool, LeaderPool

    out: dict[str, Any] = {}
    if rank == 0:
        pool = _pool(device)
        leader = LeaderPool(pool, check=check)
        kv = pool.allocator("full")
        kv.alloc(4)
        kv.alloc(4)
        try:
            leader.step()
            out["step0"] = "passed"
        except DivergenceError as e:
            out["step0"] = {"step": e.step, "op": e.op, "label": e.label, "message": str(e)}
        return out
    fp = FollowerPool(_specs(), device=device, check=check)
    _break_second_record(fp)
    try:
        fp.step()
        out["step0"] = "passed"
    except DivergenceError as e:
        cause = repr(e.__cause__)
        out["step0"] = {"type": "DivergenceError", "message": str(e), "cause": cause}
    except ukv.PoolPoisonedError as e:
        cause = repr(e.__cause__)
        out["step0"] = {"type": "PoolPoisonedError", "message": str(e), "cause": cause}
    later = {
        "step": fp.step,
        "translate": lambda: fp.translate("full", torch.zeros(2, dtype=torch.int64)),
        "kv_views": lambda: fp.kv_views("full"),
        "set_inflight_forward": lambda: fp.set_inflight_forward(SimpleNamespace(query=bool)),
    }
    out["later"] = {}
    for name, call in later.items():
        try:
            call()
            out["later"][name] = "answered"
        except ukv.PoolPoisonedError as e:
            out["later"][name] = str(e)
    return out


def _worker(rank: int, port: int, out: str) -> None:
    os.environ["TRITON_INTERPRET"] = "0"  # the NumPy / torch paths: the interpreter is slow
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=20),  # a hang becomes an error, not a wait
    )
    torch.set_num_threads(1)
    device = os.environ.get("UKV_TEST_DEVICE", "cpu")
    run = {
        "tap-resume": lambda: _tap_resume(rank, device),
        "follower-fault": lambda: _follower_fault(rank, device, True),
        "follower-fault-nocheck": lambda: _follower_fault(rank, device, False),
    }
    results: dict[str, Any] = {}
    try:
        for name in SCENARIOS:
            try:
                results[name] = {"ok": True, "detail": run[name]()}
            except Exception:  # reported to the test, which fails with the traceback
                results[name] = {"ok": False, "detail": traceback.format_exc()}
            Path(out, f"rank{rank}.json").write_text(json.dumps(results))
            dist.barrier()
    finally:
        Path(out, f"rank{rank}.json").write_text(json.dumps(results))
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every scenario's outcome, per rank (a rank that hung shows what it finished)."""
    tmp = tmp_path_factory.mktemp("tp-faults")
    ctx = multiprocessing.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, str(tmp))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(DEADLINE_S)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    out = []
    for r in range(2):
        f = Path(tmp, f"rank{r}.json")
        out.append(json.loads(f.read_text()) if f.exists() else {})
    return out


def _ok(ranks: list[dict[str, Any]], name: str) -> list[Any]:
    for rank, res in enumerate(ranks):
        assert name in res, f"rank {rank} never finished {name} (hung or died)"
        assert res[name]["ok"], f"rank {rank} of {name}:\n{res[name]['detail']}"
    return [res[name]["detail"] for res in ranks]


def test_a_tap_set_while_released_still_catches_divergence(ranks: Any) -> None:
    for d in _ok(ranks, "tap-resume"):
        assert d["raised"], "the step passed although rank 1 made an extra allocation"
        assert (d["step"], d["op"]) == (0, 1), d


def test_a_follower_that_fails_a_step_makes_every_rank_raise(ranks: Any) -> None:
    leader, follower = _ok(ranks, "follower-fault")
    assert isinstance(leader["step0"], dict), "the leader's check passed a failed step"
    assert leader["step0"]["step"] == 0 and leader["step0"]["op"] is None
    assert "rank 1 failed to apply it" in leader["step0"]["message"]
    assert INJECTED in leader["step0"]["message"]
    assert leader["step0"]["label"][0] == "" and INJECTED in leader["step0"]["label"][1]
    assert follower["step0"]["type"] == "DivergenceError", follower
    assert INJECTED in follower["step0"]["message"] and INJECTED in follower["step0"]["cause"]
    for name, what in follower["later"].items():
        assert "unusable" in what and INJECTED in what, (name, what)


def test_a_follower_that_fails_a_step_unchecked_refuses_every_later_call(ranks: Any) -> None:
    leader, follower = _ok(ranks, "follower-fault-nocheck")
    assert leader["step0"] == "passed"  # unchecked: the leader cannot know
    assert follower["step0"]["type"] == "PoolPoisonedError", follower
    assert INJECTED in follower["step0"]["message"] and INJECTED in follower["step0"]["cause"]
    for name, what in follower["later"].items():
        assert "unusable" in what and INJECTED in what, (name, what)
